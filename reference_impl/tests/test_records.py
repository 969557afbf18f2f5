"""Record batch v2: building, parsing, integrity checks, codecs, rewrites."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch as kio_read_batch
from kio.schema.errors import ErrorCode

from reference_impl.protocol import records as r
from reference_impl.protocol.records import Compression, NewRecord

TS = 1_700_000_000_123


def sample_records() -> list[NewRecord]:
    return [
        NewRecord(value=b"v0", key=b"k0", headers=(("h1", b"x"), ("h2", None)), timestamp=TS),
        NewRecord(value=None, key=b"k1", timestamp=TS + 1),
        NewRecord(value=b"v2" * 50, key=None, timestamp=TS + 999),
    ]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("snappy_framing", ["xerial", "raw"])
def test_round_trip_every_codec(codec: Compression, snappy_framing: str) -> None:
    data = r.build_batch(sample_records(), base_offset=7, compression=codec, snappy_framing=snappy_framing)
    batch = r.decode_batch(data)
    h = batch.header
    assert h.base_offset == 7 and h.last_offset == 9 and h.record_count == 3
    assert h.compression is codec
    assert h.max_timestamp == TS + 999 and h.base_timestamp == TS
    got = [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in batch.records]
    assert got == [
        (7, TS, b"k0", b"v0", (("h1", b"x"), ("h2", None))),
        (8, TS + 1, b"k1", None, ()),
        (9, TS + 999, None, b"v2" * 50, ()),
    ]


def test_uncompressed_batch_is_readable_by_kio() -> None:
    data = r.build_batch(sample_records())
    kio_batch, size = kio_read_batch(data, 0)
    assert size == len(data)
    assert [x.value for x in kio_batch.records] == [b"v0", None, b"v2" * 50]
    assert kio_batch.crc == r.parse_batch_header(data).crc


def test_millisecond_timestamps_are_exact() -> None:
    stamps = [TS, TS + 1, TS + 2, TS - 5]
    data = r.build_batch([NewRecord(value=b"x", timestamp=t) for t in stamps])
    assert [x.timestamp for x in r.decode_batch(data).records] == stamps


def test_header_fields_and_flags() -> None:
    data = r.build_batch(
        [b"a", b"b"],
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
        partition_leader_epoch=5,
        timestamp_ms=TS,
    )
    h = r.verify_batch(data)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 10)
    assert h.is_transactional and not h.is_control and h.partition_leader_epoch == 5
    assert h.last_sequence == 11
    assert h.timestamp_type is r.TimestampType.CREATE_TIME


def test_control_batch() -> None:
    data = r.build_control_batch(r.ControlType.COMMIT, producer_id=9, producer_epoch=1, coordinator_epoch=4, timestamp_ms=TS)
    b = r.decode_batch(data)
    assert b.header.is_control and b.header.is_transactional
    assert r.parse_control_record(b.records[0]) == (r.ControlType.COMMIT, 4)


def test_bad_crc_is_corrupt_message() -> None:
    data = r.with_crc(r.build_batch([b"x"]), 12345)
    assert not r.check_crc(data)
    with pytest.raises(r.CorruptRecordError) as exc:
        r.verify_batch(data)
    assert exc.value.error_code == ErrorCode.corrupt_message


def test_flipped_payload_byte_is_corrupt() -> None:
    data = bytearray(r.build_batch([b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(r.CorruptRecordError):
        r.verify_batch(bytes(data))


def test_bad_magic_and_length() -> None:
    data = bytearray(r.build_batch([b"x"]))
    data[r.MAGIC_OFFSET] = 1
    with pytest.raises(r.CorruptRecordError):
        r.verify_batch(bytes(data))
    with pytest.raises(r.CorruptRecordError):
        r.verify_batch(r.build_batch([b"x"])[:-1])
    with pytest.raises(r.CorruptRecordError):
        r.parse_batch_header(b"\x00" * 20)


def test_offset_delta_inconsistent_with_count_is_invalid_record() -> None:
    data = r.build_batch([b"a", b"b"], last_offset_delta=5)
    with pytest.raises(r.InvalidRecordError) as exc:
        r.verify_batch(data)
    assert exc.value.error_code == ErrorCode.invalid_record
    with pytest.raises(r.InvalidRecordError):
        r.verify_batch(r.build_batch([b"a"], record_count=0, last_offset_delta=-1))


def test_record_count_mismatch_is_invalid_record() -> None:
    # The header claims 3 records but only 2 are encoded (CRC still valid).
    data = r.build_batch([b"a", b"b"], record_count=3, last_offset_delta=2)
    r.verify_batch(data)  # header-level checks pass
    with pytest.raises(r.InvalidRecordError):
        r.decode_records(data)
    # Extra bytes after the declared records.
    data = r.build_batch([b"a", b"b"], record_count=1, last_offset_delta=0)
    with pytest.raises(r.InvalidRecordError):
        r.decode_records(data)


def test_undecompressable_payload_is_corrupt() -> None:
    good = r.build_batch([b"a" * 100], compression=Compression.GZIP)
    header = r.parse_batch_header(good)
    payload = b"not gzip at all"
    bad = r._assemble(  # noqa: SLF001 - test-only access to the assembler
        0, -1, header.attributes, 0, header.base_timestamp, header.max_timestamp, -1, -1, -1, 1, payload
    )
    assert r.check_crc(bad)
    with pytest.raises(r.CorruptRecordError):
        r.decode_records(bad)


def test_unknown_codec_id_is_corrupt() -> None:
    data = r.build_batch([b"x"], extra_attributes=5)
    with pytest.raises(r.CorruptRecordError):
        r.decode_records(data)


def test_split_batches_like_a_broker() -> None:
    a = r.build_batch([b"a"])
    b = r.build_batch([b"b", b"c"], base_offset=1)
    batches, trailing = r.split_batches(a + b + b[:30])
    assert batches == [a, b] and trailing == 30
    assert r.split_batches(b"") == ([], 0)
    assert r.split_batches(a[:11]) == ([], 11)
    with pytest.raises(r.CorruptRecordError):
        r.split_batches(struct.pack(">qi", 0, 3) + b"\x00" * 10)  # size below minimum
    bad_magic = bytearray(a)
    bad_magic[r.MAGIC_OFFSET] = 7
    with pytest.raises(r.CorruptRecordError):
        r.split_batches(bytes(bad_magic))


def test_decode_batches_skips_partial_tail_and_iter_records() -> None:
    a = r.build_batch([b"a"])
    c = r.build_control_batch(r.ControlType.ABORT, producer_id=1, producer_epoch=0, base_offset=1)
    assert [x.value for x in r.iter_records(a + c + a[:20])] == [b"a"]
    assert len(list(r.iter_records(a + c, include_control=True))) == 2


def test_rewrites_keep_crc_valid() -> None:
    data = r.build_batch(sample_records(), compression=Compression.LZ4)
    moved = r.with_partition_leader_epoch(r.with_base_offset(data, 1000), 7)
    h = r.verify_batch(moved)
    assert h.base_offset == 1000 and h.partition_leader_epoch == 7 and h.crc == r.parse_batch_header(data).crc
    assert [x.offset for x in r.decode_batch(moved).records] == [1000, 1001, 1002]
    stamped = r.with_max_timestamp(moved, r.TimestampType.LOG_APPEND_TIME, TS + 5000)
    h2 = r.verify_batch(stamped)
    assert h2.timestamp_type is r.TimestampType.LOG_APPEND_TIME and h2.max_timestamp == TS + 5000
    assert {x.timestamp for x in r.decode_batch(stamped).records} == {TS + 5000}
    assert r.with_max_timestamp(data, r.TimestampType.CREATE_TIME, TS + 999) == data


def test_rebuild_batch_makes_consecutive_offsets() -> None:
    data = r.build_batch([b"a", b"b", b"c"], compression=Compression.SNAPPY, offset_deltas=[0, 5, 9], last_offset_delta=2)
    h = r.parse_batch_header(data)
    recs = r.decode_records(data, h)
    assert [x.offset_delta for x in recs] == [0, 5, 9]
    rebuilt = r.rebuild_batch(h, recs, base_offset=10)
    out = r.decode_batch(rebuilt)
    assert [x.offset for x in out.records] == [10, 11, 12]
    assert out.header.compression is Compression.SNAPPY


def test_xerial_and_raw_snappy_both_decompress() -> None:
    payload = bytes(range(256)) * 400  # spans several xerial blocks
    xerial = r.compress(Compression.SNAPPY, payload)
    assert xerial.startswith(b"\x82SNAPPY\x00")
    assert r.decompress(Compression.SNAPPY, xerial) == payload
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert r.decompress(Compression.SNAPPY, raw) == payload


def test_lz4_is_frame_format() -> None:
    assert r.compress(Compression.LZ4, b"abc" * 100)[:4] == b"\x04\x22\x4d\x18"


def test_compression_parse() -> None:
    assert Compression.parse("zstd") is Compression.ZSTD
    assert Compression.parse("uncompressed") is Compression.NONE
    assert Compression.parse(None) is Compression.NONE
    assert Compression.parse(2) is Compression.SNAPPY


_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3)
_record = st.builds(
    NewRecord,
    value=st.one_of(st.none(), st.binary(max_size=64)),
    key=st.one_of(st.none(), st.binary(max_size=16)),
    headers=_headers.map(tuple),
    timestamp=st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(_record, min_size=1, max_size=8), codec=st.sampled_from(list(Compression)))
def test_property_round_trip(recs: list[NewRecord], codec: Compression) -> None:
    data = r.build_batch(recs, compression=codec)
    out = r.decode_batch(data).records
    assert [(x.key, x.value, x.headers, x.timestamp) for x in out] == [
        (n.key, n.value, tuple(n.headers), n.timestamp) for n in recs
    ]
