"""Kafka wire framing: size prefixes, request/response headers, payload codec via kio.

kio owns every message schema; this module owns only what kio leaves to the caller:
the 4-byte size prefix, choosing header versions (flexible APIs use request header v2
and response header v1; ApiVersions responses always use header v0), and mapping
(api_key, api_version) to kio's generated classes.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32
from reference_impl.protocol import schemas
from reference_impl.protocol.api_keys import ApiKey


# Kafka's socket.request.max.bytes default; larger size prefixes are treated as garbage.
DEFAULT_MAX_FRAME_BYTES = 104_857_600
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")


class FrameError(Exception):
    """The byte stream is not a valid Kafka frame sequence; the connection must close."""


class UnsupportedApi(Exception):
    """kio (and so this project) has no schema for this api key/version."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"no schema for api_key={api_key} version={api_version}")
        self.api_key = api_key
        self.api_version = api_version


class PayloadDecodeError(Exception):
    """A frame's body does not parse as the schema its header names."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int  # bytes the header occupied in the frame


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    header: RequestHeader
    body: Any  # a kio request payload dataclass
    frame: bytes


@lru_cache(maxsize=None)
def request_schema(api_key: int, api_version: int) -> type:
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return _extra_schema(api_key, api_version, "request")


@lru_cache(maxsize=None)
def response_schema(api_key: int, api_version: int) -> type:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return _extra_schema(api_key, api_version, "response")


def _extra_schema(api_key: int, api_version: int, kind: str) -> type:
    """Schemas kio lacks (KIP-1289's api key 93), generated into protocol/schemas."""
    cls = schemas.lookup(api_key, api_version, kind)
    if cls is None:
        raise UnsupportedApi(api_key, api_version)
    return cls


def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(request_schema(api_key, api_version).__flexible__)


def response_header_version(api_key: int, api_version: int) -> int:
    # ApiVersions responses keep header v0 so that a client can always parse them,
    # even when it asked with a version the broker does not know.
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


@lru_cache(maxsize=None)
def _reader(cls: type):
    return entity_reader(cls)


@lru_cache(maxsize=None)
def _writer(cls: type):
    return entity_writer(cls)


def encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    _writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode_entity(cls: type, data: bytes | memoryview, offset: int = 0) -> tuple[Any, int]:
    """Return (entity, bytes consumed)."""
    return _reader(cls)(data, offset)


def size_prefixed(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


# --- requests -------------------------------------------------------------------


def encode_request(payload: Any, correlation_id: int, client_id: str | None = "kipcheck") -> bytes:
    """Size-prefixed request frame for a kio request payload."""
    api_key, api_version = int(payload.__api_key__), int(payload.__version__)
    header_cls = RequestHeaderV2 if payload.__flexible__ else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return size_prefixed(encode_entity(header) + encode_entity(payload))


def peek_request_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, without any schema lookup."""
    if len(frame) < _HEADER_PREFIX.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame, 0)


def decode_request_header(frame: bytes) -> RequestHeader:
    """Parse the header; raises UnsupportedApi when the key/version has no schema."""
    api_key, api_version, correlation_id = peek_request_header(frame)
    flexible = is_flexible(api_key, api_version)
    cls = RequestHeaderV2 if flexible else RequestHeaderV1
    try:
        header, size = decode_entity(cls, frame)
    except Exception as exc:  # kio raises several types for short or bad buffers
        raise PayloadDecodeError(f"bad request header: {exc}") from exc
    return RequestHeader(api_key, api_version, correlation_id, header.client_id, size)


def decode_request(frame: bytes, *, strict: bool = True) -> DecodedRequest:
    """strict=False ignores bytes after the body, as Kafka's broker does (its request
    parser never checks for leftovers, and librdkafka 2.x sends 3 extra bytes in
    Metadata v9+ all-topics requests)."""
    header = decode_request_header(frame)
    cls = request_schema(header.api_key, header.api_version)
    try:
        walked = check_collection_sizes(cls, frame, header.header_size)
        body, size = decode_entity(cls, frame, header.header_size)
        if walked is None:
            check_non_nullable(body)
    except Exception as exc:
        raise PayloadDecodeError(
            f"{cls.__name__} v{header.api_version} body does not parse: {exc}"
        ) from exc
    if strict and header.header_size + size != len(frame):
        # Strict decoding (tests, tools) rejects leftovers; the broker passes strict=False.
        raise PayloadDecodeError(
            f"{len(frame) - header.header_size - size} unexpected bytes after "
            f"{cls.__name__} v{header.api_version}"
        )
    return DecodedRequest(header, body, frame)


# --- request body checks kio does not make ---------------------------------------
#
# Kafka's generated parsers refuse (and so close the connection on):
#   * an array, string or bytes length larger than the bytes that remain ("Tried to
#     allocate a collection of size N, but there are only M bytes remaining."); kio's
#     native reader instead preallocates arrays from the untrusted length, and a forged
#     5-byte varint makes the whole process abort on a failed multi-GiB allocation;
#   * null (length -1) in a non-nullable array ("non-nullable field X was serialized as
#     null"); kio hands None to the handler. (kio checks null strings and bytes itself.)
# check_collection_sizes walks the body once, before kio reads it, with a per-schema
# program in which runs of fixed-size fields are merged into one skip.

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_LENGTH_PREFIXED = {"string": 2, "bytes": 4, "records": 4}  # legacy (non-compact) length width
_SKIP, _VAR, _ARRAY, _STRUCT, _TAGS = range(5)


class _Unguardable(Exception):
    """The schema has a shape the walk does not model; kio alone decides."""


def _field_shape(f: dataclasses.Field) -> tuple[Any, bool, bool, type | None]:
    """(annotation without None, nullable, is_array, nested entity class or None)."""
    tp, nullable = f.type, False
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = typing.get_args(tp)
        nullable = type(None) in args
        rest = [a for a in args if a is not type(None)]
        tp = rest[0] if len(rest) == 1 else tp
    is_array = typing.get_origin(tp) is tuple
    inner = typing.get_args(tp)[0] if is_array else tp
    nested = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
    return tp, nullable, is_array, nested


@lru_cache(maxsize=None)
def _program(cls: type, flexible: bool) -> tuple[tuple, ...]:
    ops: list[tuple] = []
    fixed = 0
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # lives in the tagged-fields section
        _, nullable, is_array, nested = _field_shape(f)
        kind = f.metadata.get("kafka_type")
        if nested is None and kind not in _FIXED_SIZES and kind not in _LENGTH_PREFIXED:
            raise _Unguardable(f"{cls.__name__}.{f.name}: kafka_type {kind!r}")
        if nested is None and not is_array and kind in _FIXED_SIZES:
            fixed += _FIXED_SIZES[kind]
            continue
        if fixed:
            ops.append((_SKIP, fixed))
            fixed = 0
        if is_array:
            if nested is not None:
                element: Any = _program(nested, flexible)
            elif kind in _FIXED_SIZES:
                element = _FIXED_SIZES[kind]
            else:
                element = (_VAR, _LENGTH_PREFIXED[kind])
            ops.append((_ARRAY, f.name, nullable, element))
        elif nested is not None:
            if nullable:
                raise _Unguardable(f"{cls.__name__}.{f.name}: nullable struct")
            ops.append((_STRUCT, _program(nested, flexible)))
        else:
            ops.append((_VAR, _LENGTH_PREFIXED[kind]))
    if fixed:
        ops.append((_SKIP, fixed))
    if flexible:
        ops.append((_TAGS,))
    return tuple(ops)


def check_collection_sizes(cls: type, data: bytes | memoryview, offset: int) -> int | None:
    """Walk a request body as Kafka's parsers do, before kio reads it (see above); raise
    PayloadDecodeError where Kafka's parser would throw. Returns the end offset, or None
    when the schema has a shape this walk does not model (then decode_request runs the
    null check on the decoded body instead)."""
    flexible = bool(getattr(cls, "__flexible__", False))  # probe: a kio schema class (foreign)
    try:
        program = _program(cls, flexible)
    except _Unguardable:
        return None
    return _run(program, data, offset, len(data), flexible)


def _run(program: tuple[tuple, ...], data: bytes | memoryview, pos: int, end: int, flexible: bool) -> int:
    for op in program:
        code = op[0]
        if code == _SKIP:
            pos += op[1]
            if pos > end:
                raise PayloadDecodeError("Buffer is exhausted")
        elif code == _VAR:
            if flexible:
                n, pos = _uvarint(data, pos, end)
                n -= 1
            else:
                n, pos = _int(data, pos, end, op[1])
            if n > 0:
                _room(pos, end, n, "field")
                pos += n
        elif code == _ARRAY:
            if flexible:
                n, pos = _uvarint(data, pos, end)
                n -= 1
            else:
                n, pos = _int(data, pos, end, 4)
            if n < 0:
                if not op[2]:
                    raise PayloadDecodeError(f"non-nullable field {op[1]} was serialized as null")
                continue
            _room(pos, end, n, "collection")
            element = op[3]
            if type(element) is int:
                pos += n * element
                if pos > end:
                    raise PayloadDecodeError("Buffer is exhausted")
            elif element and element[0] == _VAR:
                for _ in range(n):
                    pos = _run((element,), data, pos, end, flexible)
            else:
                for _ in range(n):
                    pos = _run(element, data, pos, end, flexible)
        elif code == _STRUCT:
            pos = _run(op[1], data, pos, end, flexible)
        else:  # _TAGS: count, then (tag, size, bytes) each
            count, pos = _uvarint(data, pos, end)
            _room(pos, end, count, "collection")
            for _ in range(count):
                _, pos = _uvarint(data, pos, end)
                size, pos = _uvarint(data, pos, end)
                _room(pos, end, size, "tagged field")
                pos += size
    return pos


def _room(pos: int, end: int, n: int, what: str) -> None:
    if n > end - pos:
        raise PayloadDecodeError(
            f"Tried to allocate a {what} of size {n}, but there are only {max(end - pos, 0)} bytes remaining."
        )


def _int(data: bytes | memoryview, pos: int, end: int, width: int) -> tuple[int, int]:
    if pos + width > end:
        raise PayloadDecodeError("Buffer is exhausted")
    return int.from_bytes(data[pos : pos + width], "big", signed=True), pos + width


def _uvarint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos < end and data[pos] < 0x80:  # one byte: the common case
        return data[pos], pos + 1
    value = shift = 0
    for _ in range(5):  # Kafka reads at most 5 bytes ("Varint is too long")
        if pos >= end:
            raise PayloadDecodeError("Buffer is exhausted")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise PayloadDecodeError("Varint is too long, the most significant bit in the 5th byte is set")


@lru_cache(maxsize=None)
def _nullability(cls: type) -> tuple[tuple[str, bool, type | None], ...]:
    out = []
    for f in dataclasses.fields(cls):
        _, nullable, _, nested = _field_shape(f)
        out.append((f.name, nullable, nested))
    return tuple(out)


def check_non_nullable(entity: Any, path: str = "") -> None:
    """The null-array check on a decoded entity, for schemas the walk does not model."""
    for name, nullable, nested in _nullability(type(entity)):
        value = getattr(entity, name)  # probe: a kio entity's field, named by dataclasses.fields
        if value is None:
            if not nullable:
                raise PayloadDecodeError(f"non-nullable field {path}{name} was serialized as null")
        elif nested is not None:
            for item in value if isinstance(value, tuple) else (value,):
                check_non_nullable(item, f"{path}{name}.")


# --- responses ------------------------------------------------------------------


def encode_response(
    payload: Any, correlation_id: int, api_key: int | None = None, api_version: int | None = None
) -> bytes:
    """Size-prefixed response frame. api_key/version default to the payload's own."""
    key = int(payload.__api_key__) if api_key is None else api_key
    version = int(payload.__version__) if api_version is None else api_version
    if response_header_version(key, version) == 1:
        header = encode_entity(ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        header = encode_entity(ResponseHeaderV0(correlation_id=i32(correlation_id)))
    return size_prefixed(header + encode_entity(payload))


@dataclass(frozen=True, slots=True)
class DecodedResponse:
    correlation_id: int
    body: Any
    trailing_bytes: int  # bytes after the body; Kafka clients ignore them, strict checks do not


def decode_response_frame(frame: bytes, api_key: int, api_version: int) -> DecodedResponse:
    """Decode a response frame (without its size prefix), counting any trailing bytes."""
    cls = response_schema(api_key, api_version)
    header_cls = (
        ResponseHeaderV1 if response_header_version(api_key, api_version) == 1 else ResponseHeaderV0
    )
    try:
        header, hsize = decode_entity(header_cls, frame)
        body, bsize = decode_entity(cls, frame, hsize)
    except Exception as exc:
        raise PayloadDecodeError(f"{cls.__name__} v{api_version} does not parse: {exc}") from exc
    return DecodedResponse(int(header.correlation_id), body, len(frame) - hsize - bsize)


def decode_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """(correlation_id, payload); strict: trailing bytes are an error."""
    decoded = decode_response_frame(frame, api_key, api_version)
    if decoded.trailing_bytes:
        cls = response_schema(api_key, api_version)
        raise PayloadDecodeError(f"{decoded.trailing_bytes} trailing bytes after {cls.__name__} v{api_version}")
    return decoded.correlation_id, decoded.body


def decode_tolerant_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, object]:
    """(correlation id, body) of a response frame (no size prefix) with the tolerant class."""
    cls = schemas.tolerant_response(api_key, api_version)
    if cls is None:
        raise LookupError(f"no tolerant schema for api {api_key} v{api_version}")
    header_cls = ResponseHeaderV1 if response_header_version(api_key, api_version) == 1 \
        else ResponseHeaderV0
    header, size = decode_entity(header_cls, frame)
    body, _ = decode_entity(cls, frame, size)
    return int(header.correlation_id), body


# --- stream splitting -------------------------------------------------------------


class FrameReader:
    """Splits a byte stream into frames; raises FrameError on an impossible size.

    Complete frames before an impossible size prefix are returned first and the error
    is raised by the next call (`feed(b"")` re-checks the buffer): Kafka reads one size
    prefix at a time, so it answers those requests before it closes the connection."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        while len(self._buf) >= 4:
            (size,) = _SIZE.unpack_from(self._buf, 0)
            if frames and not 0 <= size <= self._max:
                break  # answer the frames before it; the next feed raises
            check_frame_size(size, self._max)
            if len(self._buf) < 4 + size:
                break
            frames.append(bytes(self._buf[4 : 4 + size]))
            del self._buf[: 4 + size]
        return frames

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)


def check_frame_size(size: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
    if size < 0:
        raise FrameError(f"negative frame size {size}")
    if size > max_frame_bytes:
        raise FrameError(f"frame size {size} exceeds the limit of {max_frame_bytes} bytes")
