"""Record batch v2 (magic 2) handling on top of kio's primitive readers and writers.

What lives here:

* splitting a `records` field into batches the way a Kafka broker does
  (`split_batches`), parsing a batch header without touching the records
  (`parse_batch_header`), and the integrity checks (`check_crc`, `verify_batch`);
* decoding records with exact millisecond timestamps (`decode_records`,
  `decode_batch`, `decode_batches`); kio's own `read_record` truncates
  timestamps to whole seconds, so the record layout is read here with kio's
  varint readers;
* compression codecs (gzip, snappy raw and xerial-framed, lz4 frame, zstd) via cramjam;
* a builder for v2 batches (`build_batch`, `build_control_batch`) used by the raw
  client, tests and by the broker when it must rebuild a batch;
* in-place rewrites of a stored batch (`with_base_offset`,
  `with_partition_leader_epoch`, `with_max_timestamp`).

Errors are `RecordBatchError` subclasses carrying the Kafka error code a broker
answers with: CORRUPT_MESSAGE for a batch whose framing, magic, size or CRC is
wrong (and for a compressed payload that does not decompress), INVALID_RECORD for
a well-framed batch whose records are malformed or inconsistent with the header.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import cramjam
from crc32c import crc32c
from kio.records.readers import read_header as _kio_read_header
from kio.records.readers import read_signed_compact_string_as_bytes_nullable as _kio_read_nullable_bytes
from kio.schema.errors import ErrorCode
from kio.serial.errors import BufferUnderflow
from kio.serial.readers import read_int8, read_signed_varint, read_signed_varlong
from kio.serial.writers import write_signed_varint, write_signed_varlong

MAGIC_V2 = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Byte layout of a v2 batch header.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
LOG_OVERHEAD = 12  # base offset + length: the bytes `batch_length` does not count
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers everything from here to the end of the batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61  # header size; also the smallest valid v2 batch
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
# The smallest size field any magic allows (v0 record overhead); smaller is corrupt framing.
MIN_RECORD_SIZE_FIELD = 14

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: "Compression | int | str | None") -> "Compression":
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            name = value.strip().lower()
            if name in ("none", "uncompressed", ""):
                return cls.NONE
            return cls[name.upper()]
        return cls(int(value))


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


# --- errors -------------------------------------------------------------------------


class RecordBatchError(Exception):
    """A batch a broker must reject; `error_code` is the Kafka error to answer."""

    error_code: ErrorCode = ErrorCode.corrupt_message

    def __init__(self, message: str, record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.message = message
        # (batch index of the record, message) pairs, as in ProduceResponse.record_errors
        self.record_errors: tuple[tuple[int, str], ...] = tuple(record_errors)


class CorruptRecordError(RecordBatchError):
    """Bad framing, magic, size or CRC (CORRUPT_MESSAGE)."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(RecordBatchError):
    """Well-framed batch with malformed or inconsistent records (INVALID_RECORD)."""

    error_code = ErrorCode.invalid_record


class InvalidTimestampError(RecordBatchError):
    """Record timestamps outside the allowed window (INVALID_TIMESTAMP)."""

    error_code = ErrorCode.invalid_timestamp


class RecordTooLargeError(RecordBatchError):
    """Batch larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    error_code = ErrorCode.message_too_large


class UnsupportedCompressionError(RecordBatchError):
    """Codec not allowed for the request version (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = ErrorCode.unsupported_compression_type


# --- header -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 batch (records not decoded)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_id(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def compression(self) -> Compression:
        """Raises CorruptRecordError for codec ids Kafka does not define."""
        try:
            return Compression(self.compression_id)
        except ValueError:
            raise CorruptRecordError(f"unknown compression type id {self.compression_id}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_batch_header(data: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """Parse the fixed header of the batch at `offset`; checks only that it is there."""
    if len(data) - offset < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch of {len(data) - offset} bytes is smaller than the "
            f"{RECORD_BATCH_OVERHEAD}-byte v2 batch overhead"
        )
    return BatchHeader(*_HEADER.unpack_from(data, offset))


def split_batches(data: bytes | bytearray | memoryview | None) -> tuple[list[bytes], int]:
    """Split a `records` field into whole batches, as a broker iterates it.

    Returns (batches, trailing): `trailing` counts bytes after the last whole batch
    that were ignored (an incomplete batch at the end is not an error, as in Kafka).
    Raises CorruptRecordError for an impossible size field or an unknown magic.
    """
    if not data:
        return [], 0
    view = memoryview(data)
    total = len(view)
    pos = 0
    batches: list[bytes] = []
    while total - pos >= LOG_OVERHEAD:
        (size,) = _I32.unpack_from(view, pos + LENGTH_OFFSET)
        if size < MIN_RECORD_SIZE_FIELD:
            raise CorruptRecordError(
                f"record size {size} is less than the minimum record overhead ({MIN_RECORD_SIZE_FIELD})"
            )
        if total - pos < HEADER_SIZE_UP_TO_MAGIC:
            break
        magic = struct.unpack_from(">b", view, pos + MAGIC_OFFSET)[0]
        if magic < 0 or magic > MAGIC_V2:
            raise CorruptRecordError(f"invalid magic {magic} in record batch")
        end = pos + LOG_OVERHEAD + size
        if end > total:
            break
        batches.append(bytes(view[pos:end]))
        pos = end
    return batches, total - pos


def magic_of(batch: bytes | memoryview) -> int:
    return struct.unpack_from(">b", batch, MAGIC_OFFSET)[0]


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def check_crc(batch: bytes | bytearray | memoryview) -> bool:
    """True when the batch is at least a header long and its CRC32C matches."""
    if len(batch) < RECORD_BATCH_OVERHEAD:
        return False
    (stored,) = _U32.unpack_from(batch, CRC_OFFSET)
    return stored == compute_crc(batch)


def verify_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Integrity of one whole v2 batch: magic, length, CRC, offsets vs record count.

    CORRUPT_MESSAGE for magic/length/CRC, INVALID_RECORD for an offset range that
    does not match the record count. Records themselves are not decoded.
    """
    if len(batch) < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(f"record batch of {len(batch)} bytes is truncated")
    magic = magic_of(batch)
    if magic != MAGIC_V2:
        raise CorruptRecordError(f"record batch magic is {magic}, only magic {MAGIC_V2} is supported")
    header = parse_batch_header(batch)
    if header.size_in_bytes != len(batch):
        raise CorruptRecordError(
            f"record batch length field says {header.size_in_bytes} bytes but the batch has {len(batch)}"
        )
    if not check_crc(batch):
        raise CorruptRecordError(
            f"record batch is corrupt (stored crc = {header.crc}, computed = {compute_crc(batch)})"
        )
    check_offsets(header)
    return header


def check_offsets(header: BatchHeader) -> None:
    """last_offset_delta must describe exactly record_count offsets (INVALID_RECORD)."""
    from_offsets = header.last_offset_delta + 1
    if from_offsets <= 0:
        raise InvalidRecordError(
            f"batch has an invalid offset range [{header.base_offset}, {header.last_offset}]"
        )
    if header.record_count <= 0:
        raise InvalidRecordError(f"invalid record count {header.record_count} in batch")
    if from_offsets != header.record_count:
        raise InvalidRecordError(
            f"batch offset range [{header.base_offset}, {header.last_offset}] does not match "
            f"its record count {header.record_count}"
        )


# --- compression --------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_LEN = 16  # magic (8) + version (4) + compatible version (4)
_XERIAL_BLOCK = 32 * 1024


def compress(codec: Compression | int, data: bytes, *, snappy_framing: str = "xerial") -> bytes:
    """Compress a records payload the way Kafka clients do."""
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        if snappy_framing == "raw":
            return bytes(cramjam.snappy.compress_raw(data))
        if snappy_framing != "xerial":
            raise ValueError(f"snappy framing must be 'xerial' or 'raw', not {snappy_framing!r}")
        out = bytearray(_XERIAL_MAGIC)
        out += _I32.pack(1) + _I32.pack(1)
        for start in range(0, max(len(data), 1), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
            out += _I32.pack(len(block)) + block
        return bytes(out)
    if codec is Compression.LZ4:
        # LZ4 frame format with independent blocks, as Kafka's Java client writes it.
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


def decompress(codec: Compression | int, data: bytes | memoryview) -> bytes:
    """Decompress a batch payload; CorruptRecordError when it does not decompress."""
    codec = Compression(codec)
    raw = bytes(data)
    try:
        if codec is Compression.NONE:
            return raw
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(raw))
        if codec is Compression.SNAPPY:
            if raw.startswith(_XERIAL_MAGIC):
                return _xerial_decompress(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(raw))
        if codec is Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(raw))
    except RecordBatchError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and friends
        raise CorruptRecordError(f"{codec.name.lower()} payload does not decompress: {exc}") from exc
    raise CorruptRecordError(f"unknown compression type id {int(codec)}")


def _xerial_decompress(raw: bytes) -> bytes:
    if len(raw) < _XERIAL_HEADER_LEN:
        raise CorruptRecordError("xerial snappy header is truncated")
    out = bytearray()
    pos = _XERIAL_HEADER_LEN
    while pos < len(raw):
        if len(raw) - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (n,) = _I32.unpack_from(raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise CorruptRecordError("xerial snappy block overruns the payload")
        out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + n]))
        pos += n
    return bytes(out)


# --- records ------------------------------------------------------------------------


Header = tuple[str, "bytes | None"]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record; `offset` and `timestamp` are absolute (milliseconds exact)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0
    offset_delta: int = 0
    timestamp_delta: int = 0


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to put into a batch; timestamp None means the batch's base timestamp."""

    value: bytes | None = None
    key: bytes | None = None
    headers: tuple[Header, ...] | Sequence[Header] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: tuple[Record, ...]

    @property
    def is_control(self) -> bool:
        return self.header.is_control


def _read_records(payload: bytes, header: BatchHeader) -> tuple[Record, ...]:
    count = header.record_count
    if count < 0:
        raise InvalidRecordError(f"invalid record count {count}")
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    end = len(payload)
    try:
        for _ in range(count):
            length, n = read_signed_varint(payload, pos)
            pos += n
            if length < 0 or pos + length > end:
                raise InvalidRecordError(
                    f"record length {length} is invalid for the {end - pos} bytes left in the batch"
                )
            body_end = pos + length
            body = payload[pos:body_end]
            p = 0
            attributes, n = read_int8(body, p)
            p += n
            ts_delta, n = read_signed_varlong(body, p)
            p += n
            off_delta, n = read_signed_varint(body, p)
            p += n
            key, n = _kio_read_nullable_bytes(body, p)
            p += n
            value, n = _kio_read_nullable_bytes(body, p)
            p += n
            header_count, n = read_signed_varint(body, p)
            p += n
            if header_count < 0:
                raise InvalidRecordError(f"invalid negative header count {header_count}")
            headers: list[Header] = []
            for _ in range(header_count):
                h, n = _kio_read_header(body, p)
                p += n
                if h.key is None:
                    raise InvalidRecordError("record header key is null")
                headers.append((h.key.decode("utf-8", "surrogateescape"), h.value))
            if p != length:
                raise InvalidRecordError(
                    f"record declares {length} bytes but its fields use {p}"
                )
            pos = body_end
            timestamp = header.max_timestamp if log_append else header.base_timestamp + ts_delta
            records.append(
                Record(
                    offset=header.base_offset + off_delta,
                    timestamp=timestamp,
                    key=key,
                    value=value,
                    headers=tuple(headers),
                    attributes=attributes,
                    offset_delta=off_delta,
                    timestamp_delta=ts_delta,
                )
            )
    except RecordBatchError:
        raise
    except (BufferUnderflow, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecordError(f"malformed record in batch: {exc}") from exc
    if pos != end:
        raise InvalidRecordError(
            f"{end - pos} bytes remain after the {count} records the batch declares"
        )
    return tuple(records)


def records_payload(batch: bytes | memoryview, header: BatchHeader | None = None) -> bytes:
    """The batch's records section, decompressed."""
    header = header or parse_batch_header(batch)
    body = memoryview(batch)[RECORD_BATCH_OVERHEAD : header.size_in_bytes]
    return decompress(header.compression, body)


def decode_records(batch: bytes | memoryview, header: BatchHeader | None = None) -> tuple[Record, ...]:
    """Decode every record of one whole batch (no CRC check; see verify_batch)."""
    header = header or parse_batch_header(batch)
    return _read_records(records_payload(batch, header), header)


def decode_batch(batch: bytes | memoryview, *, verify: bool = True) -> DecodedBatch:
    header = verify_batch(batch) if verify else parse_batch_header(batch)
    return DecodedBatch(header, decode_records(batch, header))


def decode_batches(data: bytes | memoryview | None, *, verify: bool = True) -> list[DecodedBatch]:
    """Decode a records field (e.g. a Fetch response partition); a trailing partial
    batch is ignored as consumers do."""
    batches, _ = split_batches(data)
    return [decode_batch(b, verify=verify) for b in batches]


def iter_records(data: bytes | memoryview | None, *, include_control: bool = False) -> Iterable[Record]:
    for batch in decode_batches(data):
        if batch.is_control and not include_control:
            continue
        yield from batch.records


def parse_control_record(record: Record) -> tuple[ControlType, int]:
    """(marker type, coordinator epoch) of a transaction marker control record."""
    if record.key is None or len(record.key) < 4:
        raise InvalidRecordError("control record key is missing or too short")
    _version, ctype = struct.unpack_from(">hh", record.key, 0)
    coordinator_epoch = -1
    if record.value is not None and len(record.value) >= 6:
        _v, coordinator_epoch = struct.unpack_from(">hi", record.value, 0)
    try:
        return ControlType(ctype), coordinator_epoch
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {ctype}") from None


# --- building -----------------------------------------------------------------------


def _encode_record(buf: io.BytesIO, rec: NewRecord | Record, offset_delta: int, ts_delta: int, attributes: int = 0) -> None:
    body = io.BytesIO()
    body.write(struct.pack(">b", attributes))
    write_signed_varlong(body, ts_delta)
    write_signed_varint(body, offset_delta)
    _write_nullable_bytes(body, rec.key)
    _write_nullable_bytes(body, rec.value)
    headers = tuple(rec.headers or ())
    write_signed_varint(body, len(headers))
    for hk, hv in headers:
        _write_nullable_bytes(body, hk.encode("utf-8", "surrogateescape") if isinstance(hk, str) else bytes(hk))
        _write_nullable_bytes(body, hv)
    raw = body.getvalue()
    write_signed_varint(buf, len(raw))
    buf.write(raw)


def _write_nullable_bytes(buf: io.BytesIO, value: bytes | str | None) -> None:
    if value is None:
        write_signed_varint(buf, -1)
        return
    if isinstance(value, str):
        value = value.encode()
    write_signed_varint(buf, len(value))
    buf.write(value)


def _as_new_record(item: Any) -> NewRecord | Record:
    if isinstance(item, (NewRecord, Record)):
        return item
    if isinstance(item, (bytes, bytearray, str)) or item is None:
        return NewRecord(value=item.encode() if isinstance(item, str) else item)
    if isinstance(item, dict):
        return NewRecord(**item)
    if isinstance(item, tuple):
        # (key, value[, headers[, timestamp]])
        key, value, *rest = item
        return NewRecord(value, key, *rest)
    raise TypeError(f"cannot make a record of {type(item).__name__}")


def build_batch(
    records: Sequence[NewRecord | Record | bytes | dict | tuple],
    *,
    base_offset: int = 0,
    compression: Compression | int | str = Compression.NONE,
    timestamp_ms: int | None = None,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    snappy_framing: str = "xerial",
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    record_count: int | None = None,
    extra_attributes: int = 0,
) -> bytes:
    """Make one v2 batch.

    Record timestamps default to `timestamp_ms` (or 0 when not given at all).
    `offset_deltas`, `last_offset_delta` and `record_count` override the computed
    values so tests can build deliberately inconsistent batches.
    """
    recs = [_as_new_record(r) for r in records]
    codec = Compression.parse(compression)
    stamps = [
        (r.timestamp if r.timestamp is not None else (timestamp_ms if timestamp_ms is not None else 0))
        for r in recs
    ]
    base_ts = stamps[0] if stamps else (timestamp_ms if timestamp_ms is not None else NO_TIMESTAMP)
    if max_timestamp is None:
        max_timestamp = max(stamps) if stamps else NO_TIMESTAMP
    deltas = list(offset_deltas) if offset_deltas is not None else list(range(len(recs)))
    body = io.BytesIO()
    for rec, delta, ts in zip(recs, deltas, stamps):
        _encode_record(body, rec, delta, ts - base_ts)
    payload = compress(codec, body.getvalue(), snappy_framing=snappy_framing)
    attributes = int(codec) | extra_attributes
    if TimestampType(timestamp_type) is TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if last_offset_delta is None:
        last_offset_delta = (max(deltas) if deltas else 0) if offset_deltas is not None else max(len(recs) - 1, 0)
    count = len(recs) if record_count is None else record_count
    return _assemble(
        base_offset,
        partition_leader_epoch,
        attributes,
        last_offset_delta,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        payload,
    )


def _assemble(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    payload: bytes,
) -> bytes:
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + payload
    )
    batch_length = len(after_crc) + 9  # + partition leader epoch (4) + magic (1) + crc (4)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc32c(after_crc))
        + after_crc
    )


def build_control_batch(
    control_type: ControlType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (COMMIT or ABORT): transactional + control, one record."""
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [NewRecord(key=key, value=value, timestamp=timestamp_ms)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def rebuild_batch(
    header: BatchHeader,
    records: Sequence[Record],
    *,
    base_offset: int,
    compression: Compression | None = None,
    timestamp_type: TimestampType | None = None,
    log_append_time: int | None = None,
    partition_leader_epoch: int | None = None,
) -> bytes:
    """Re-encode a batch with consecutive offset deltas (the broker's non-in-place path)."""
    codec = header.compression if compression is None else compression
    ts_type = header.timestamp_type if timestamp_type is None else timestamp_type
    new = [NewRecord(value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp) for r in records]
    max_ts = None
    if ts_type is TimestampType.LOG_APPEND_TIME and log_append_time is not None:
        max_ts = log_append_time
    return build_batch(
        new,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=ts_type,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch if partition_leader_epoch is None else partition_leader_epoch,
    )


# --- in-place rewrites --------------------------------------------------------------


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The batch with another base offset (not covered by the CRC)."""
    return _I64.pack(base_offset) + bytes(batch[8:])


def with_partition_leader_epoch(batch: bytes, epoch: int) -> bytes:
    """The batch with another partition leader epoch (not covered by the CRC)."""
    return bytes(batch[:PARTITION_LEADER_EPOCH_OFFSET]) + _I32.pack(epoch) + bytes(batch[MAGIC_OFFSET:])


def with_max_timestamp(batch: bytes, timestamp_type: TimestampType | int, max_timestamp: int) -> bytes:
    """Set the timestamp type bit and max timestamp, recomputing the CRC (as a broker
    does for LogAppendTime topics and to correct the max timestamp)."""
    header = parse_batch_header(batch)
    attributes = header.attributes & ~ATTR_TIMESTAMP_TYPE
    if TimestampType(timestamp_type) is TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if attributes == header.attributes and max_timestamp == header.max_timestamp:
        return bytes(batch)
    buf = bytearray(batch)
    _I16.pack_into(buf, ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(buf, MAX_TIMESTAMP_OFFSET, max_timestamp)
    _U32.pack_into(buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def with_crc(batch: bytes, crc: int) -> bytes:
    """The batch with an arbitrary stored CRC (tests: corrupt batches)."""
    buf = bytearray(batch)
    _U32.pack_into(buf, CRC_OFFSET, crc & 0xFFFFFFFF)
    return bytes(buf)


__all__ = [
    "BatchHeader",
    "Compression",
    "ControlType",
    "CorruptRecordError",
    "DecodedBatch",
    "InvalidRecordError",
    "InvalidTimestampError",
    "NewRecord",
    "Record",
    "RecordBatchError",
    "RecordTooLargeError",
    "TimestampType",
    "UnsupportedCompressionError",
    "build_batch",
    "build_control_batch",
    "check_crc",
    "check_offsets",
    "compress",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "decompress",
    "iter_records",
    "parse_batch_header",
    "parse_control_record",
    "rebuild_batch",
    "records_payload",
    "split_batches",
    "verify_batch",
    "with_base_offset",
    "with_crc",
    "with_max_timestamp",
    "with_partition_leader_epoch",
]
