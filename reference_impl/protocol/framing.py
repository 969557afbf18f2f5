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

API_VERSIONS_KEY = 18
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
        raise UnsupportedApi(api_key, api_version) from None


@lru_cache(maxsize=None)
def response_schema(api_key: int, api_version: int) -> type:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedApi(api_key, api_version) from None


def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(request_schema(api_key, api_version).__flexible__)


def response_header_version(api_key: int, api_version: int) -> int:
    # ApiVersions responses keep header v0 so that a client can always parse them,
    # even when it asked with a version the broker does not know.
    if api_key == API_VERSIONS_KEY:
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
        body, size = decode_entity(cls, frame, header.header_size)
    except Exception as exc:
        raise PayloadDecodeError(
            f"{cls.__name__} v{header.api_version} body does not parse: {exc}"
        ) from exc
    check_non_nullable(body)
    if strict and header.header_size + size != len(frame):
        # Kafka rejects requests with trailing garbage rather than ignoring it.
        raise PayloadDecodeError(
            f"{len(frame) - header.header_size - size} unexpected bytes after "
            f"{cls.__name__} v{header.api_version}"
        )
    return DecodedRequest(header, body, frame)


@lru_cache(maxsize=None)
def _nullability(cls: type) -> tuple[tuple[str, bool, type | None], ...]:
    """(field, nullable, nested entity class or None) for each field of a kio entity."""
    out = []
    for f in dataclasses.fields(cls):
        tp, nullable = f.type, False
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            args = typing.get_args(tp)
            nullable = type(None) in args
            rest = [a for a in args if a is not type(None)]
            tp = rest[0] if len(rest) == 1 else tp
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
        nested = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        out.append((f.name, nullable, nested))
    return tuple(out)


def check_non_nullable(entity: Any, path: str = "") -> None:
    """Kafka's generated parsers reject null (length -1) in a non-nullable array or
    struct ("non-nullable field X was serialized as null"); kio reads such an array as
    None, so the check is made here. Strings and bytes are already checked by kio."""
    for name, nullable, nested in _nullability(type(entity)):
        value = getattr(entity, name)
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
