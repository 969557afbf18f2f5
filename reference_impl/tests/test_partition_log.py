"""PartitionLog: append validation, offsets, reads, ListOffsets lookups, retention."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from reference_impl.model.clock import ManualClock
from reference_impl.model.partition_log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    DuplicateBatch,
    IsolationLevel,
    LogConfig,
    LogError,
    OffsetOutOfRangeError,
    PartitionLog,
    ProducerStateTracker,
    TimestampAndOffset,
)
from reference_impl.protocol import records as r
from reference_impl.protocol.records import Compression, NewRecord, TimestampType

NOW = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def batch(*values: bytes, ts: int = NOW, **kw) -> bytes:
    return r.build_batch([NewRecord(value=v, key=b"k", timestamp=ts + i) for i, v in enumerate(values)], **kw)


def test_append_assigns_offsets(clock: ManualClock) -> None:
    log = PartitionLog("t", 0)
    a = log.append_from_client(batch(b"a", b"b"), now_ms=clock.now_ms())
    b = log.append_from_client(batch(b"c"), now_ms=clock.now_ms())
    assert (a.base_offset, a.last_offset, b.base_offset, b.last_offset) == (0, 1, 2, 2)
    assert a.log_append_time == -1 and a.log_start_offset == 0
    assert log.log_end_offset == log.high_watermark == log.last_stable_offset == 3
    stored = log.batches
    assert [s.base_offset for s in stored] == [0, 2]
    assert r.verify_batch(stored[1].data).base_offset == 2
    assert [x.offset for x in r.decode_batch(stored[1].data).records] == [2]


def test_leader_epoch_is_stamped_and_cached(clock: ManualClock) -> None:
    log = PartitionLog("t", 0, leader_epoch=3)
    log.append_from_client(batch(b"a"), now_ms=NOW)
    log.leader_epoch = 5
    log.append_from_client(batch(b"b"), now_ms=NOW)
    assert [r.parse_batch_header(s.data).partition_leader_epoch for s in log.batches] == [3, 5]
    assert log.epoch_cache == [(3, 0), (5, 1)]


@pytest.mark.parametrize(
    "data, code",
    [
        (r.build_batch([b"x"], base_offset=5), ErrorCode.invalid_record),
        (r.with_crc(r.build_batch([b"x"]), 1), ErrorCode.corrupt_message),
        (r.build_batch([b"x", b"y"], last_offset_delta=0), ErrorCode.invalid_record),
        (r.build_batch([b"x"], control=True, transactional=True, producer_id=1, producer_epoch=0), ErrorCode.invalid_record),
        (r.build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=-1), ErrorCode.invalid_record),
        (r.build_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True), ErrorCode.invalid_txn_state),
        (r.build_batch([b"x", b"y"], record_count=3, last_offset_delta=2), ErrorCode.invalid_record),
    ],
)
def test_rejections(data: bytes, code: ErrorCode) -> None:
    log = PartitionLog("t", 0)
    with pytest.raises((r.RecordBatchError, LogError)) as exc:
        log.append_from_client(data, now_ms=NOW)
    assert exc.value.error_code == code
    assert log.log_end_offset == 0


def test_message_too_large() -> None:
    log = PartitionLog("t", 0, LogConfig(max_message_bytes=100))
    with pytest.raises(r.RecordTooLargeError) as exc:
        log.append_from_client(batch(b"x" * 200), now_ms=NOW)
    assert exc.value.error_code == ErrorCode.message_too_large


def test_idempotent_batch_from_unknown_producer_is_accepted() -> None:
    log = PartitionLog("t", 0)
    res = log.append_from_client(r.build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=42), now_ms=NOW)
    assert res.base_offset == 0


def test_producer_state_seam_is_called() -> None:
    calls = []

    class Tracker(ProducerStateTracker):
        def validate(self, log, header, now_ms):
            calls.append(("validate", header.producer_id))
            if header.base_sequence == 99:
                raise LogError("dup", ErrorCode.duplicate_sequence_number)

        def on_append(self, log, stored, now_ms):
            calls.append(("append", stored.base_offset))

    log = PartitionLog("t", 0, producer_state=Tracker())
    log.append_from_client(r.build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0), now_ms=NOW)
    with pytest.raises(LogError) as exc:
        log.append_from_client(r.build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=99), now_ms=NOW)
    assert exc.value.error_code == ErrorCode.duplicate_sequence_number
    log.append_from_client(batch(b"plain"), now_ms=NOW)  # no producer id: seam not called
    assert calls == [("validate", 7), ("append", 0), ("validate", 7)]


def test_timestamp_window() -> None:
    log = PartitionLog("t", 0, LogConfig(timestamp_after_max_ms=1000, timestamp_before_max_ms=5000))
    log.append_from_client(batch(b"ok", ts=NOW + 1000), now_ms=NOW)
    with pytest.raises(r.InvalidTimestampError) as exc:
        log.append_from_client(batch(b"a", b"b", ts=NOW + 1000), now_ms=NOW)  # second record is NOW + 1001
    assert exc.value.error_code == ErrorCode.invalid_timestamp
    assert [i for i, _ in exc.value.record_errors] == [1]
    with pytest.raises(r.InvalidTimestampError):
        log.append_from_client(batch(b"old", ts=NOW - 5001), now_ms=NOW)


def test_client_may_not_claim_log_append_time_on_log_append_topic() -> None:
    log = PartitionLog("t", 0, LogConfig(timestamp_type=TimestampType.LOG_APPEND_TIME))
    with pytest.raises(r.InvalidTimestampError):
        log.append_from_client(r.build_batch([b"x"], timestamp_type=TimestampType.LOG_APPEND_TIME), now_ms=NOW)


def test_log_append_time_topic(clock: ManualClock) -> None:
    log = PartitionLog("t", 0, LogConfig(timestamp_type=TimestampType.LOG_APPEND_TIME))
    res = log.append_from_client(batch(b"a", b"b", ts=5), now_ms=NOW + 7)
    assert res.log_append_time == NOW + 7
    out = r.decode_batch(log.batches[0].data)
    assert out.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [x.timestamp for x in out.records] == [NOW + 7, NOW + 7]


def test_max_timestamp_is_corrected() -> None:
    log = PartitionLog("t", 0)
    data = r.build_batch([NewRecord(b"a", timestamp=NOW), NewRecord(b"b", timestamp=NOW + 9)], max_timestamp=NOW)
    log.append_from_client(data, now_ms=NOW)
    assert r.verify_batch(log.batches[0].data).max_timestamp == NOW + 9


def test_compacted_topic_requires_keys() -> None:
    log = PartitionLog("t", 0, LogConfig(compacted=True))
    with pytest.raises(r.InvalidRecordError) as exc:
        log.append_from_client(r.build_batch([NewRecord(b"v", key=b"k"), NewRecord(b"v")]), now_ms=NOW)
    assert exc.value.record_errors[0][0] == 1


def test_compressed_batch_with_bad_inner_offsets_is_rebuilt() -> None:
    log = PartitionLog("t", 0)
    log.append_from_client(batch(b"first"), now_ms=NOW)
    data = r.build_batch([b"a", b"b"], compression=Compression.GZIP, offset_deltas=[3, 8], last_offset_delta=1)
    log.append_from_client(data, now_ms=NOW)
    out = r.decode_batch(log.batches[1].data)
    assert [x.offset for x in out.records] == [1, 2] and out.header.compression is Compression.GZIP


def test_topic_compression_type_recompresses() -> None:
    log = PartitionLog("t", 0, LogConfig(compression="zstd"))
    log.append_from_client(batch(b"a", b"b", compression=Compression.GZIP), now_ms=NOW)
    out = r.decode_batch(log.batches[0].data)
    assert out.header.compression is Compression.ZSTD and [x.value for x in out.records] == [b"a", b"b"]


def test_read_returns_whole_batches() -> None:
    log = PartitionLog("t", 0)
    for i in range(5):
        log.append_from_client(batch(bytes([65 + i]) * 50, b"x"), now_ms=NOW)
    size = log.batches[0].size
    rr = log.read(0, size * 2 + 10)
    assert [b.base_offset for b in rr.batches] == [0, 2]
    assert rr.records == log.batches[0].data + log.batches[1].data
    assert rr.high_watermark == 10 and rr.log_start_offset == 0 and rr.aborted_transactions is None
    # Offset in the middle of a batch returns the batch holding it.
    assert log.read(3, 10**6).batches[0].base_offset == 2
    # First batch even when larger than max bytes, unless told otherwise.
    assert len(log.read(0, 1).batches) == 1
    assert log.read(0, 1, min_one_message=False).batches == ()
    # At the log end: empty, no error; beyond: out of range.
    assert log.read(10, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError) as exc:
        log.read(11, 100)
    assert exc.value.error_code == ErrorCode.offset_out_of_range
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert log.bytes_available(0, IsolationLevel.READ_UNCOMMITTED) == sum(b.size for b in log.batches)
    assert log.bytes_available(4, IsolationLevel.READ_UNCOMMITTED, max_bytes=5) == 5


def test_transactions_seam_lso_and_aborted_index() -> None:
    log = PartitionLog("t", 0)
    log.append_from_client(batch(b"plain"), now_ms=NOW)
    txn = r.build_batch([b"t1", b"t2"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    log.append_stored(txn, now_ms=NOW)  # as a transactions-aware producer path would
    log.append_from_client(batch(b"after"), now_ms=NOW)
    assert log.first_unstable_offset == 1
    assert (log.high_watermark, log.last_stable_offset) == (4, 1)
    committed = log.read(0, 10**6, IsolationLevel.READ_COMMITTED)
    assert [b.base_offset for b in committed.batches] == [0] and committed.aborted_transactions == ()
    log.append_marker(r.ControlType.ABORT, producer_id=5, producer_epoch=0, coordinator_epoch=0, now_ms=NOW)
    assert log.last_stable_offset == 5
    rr = log.read(0, 10**6, IsolationLevel.READ_COMMITTED)
    assert [b.base_offset for b in rr.batches] == [0, 1, 3, 4]
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in rr.aborted_transactions] == [(5, 1, 4)]
    assert log.read(3, 10**6, IsolationLevel.READ_COMMITTED).aborted_transactions[0].first_offset == 1
    assert log.read(5, 10**6, IsolationLevel.READ_COMMITTED).aborted_transactions == ()
    assert log.offset_for_timestamp(LATEST_TIMESTAMP, IsolationLevel.READ_COMMITTED).offset == 5


def test_list_offsets_lookups() -> None:
    log = PartitionLog("t", 0, leader_epoch=2)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0, -1)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 0, 2)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    log.append_from_client(r.build_batch([NewRecord(b"a", timestamp=100), NewRecord(b"b", timestamp=300)]), now_ms=NOW)
    log.append_from_client(r.build_batch([NewRecord(b"c", timestamp=200), NewRecord(b"d", timestamp=400)]), now_ms=NOW)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0, 2)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 4, 2)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(400, 3, 2)
    assert log.offset_for_timestamp(150) == TimestampAndOffset(300, 1, 2)
    assert log.offset_for_timestamp(0) == TimestampAndOffset(100, 0, 2)
    assert log.offset_for_timestamp(301) == TimestampAndOffset(400, 3, 2)
    assert log.offset_for_timestamp(401) is None
    with pytest.raises(LogError) as exc:
        log.offset_for_timestamp(-7)
    assert exc.value.error_code == ErrorCode.unsupported_version


def test_delete_records_moves_log_start() -> None:
    log = PartitionLog("t", 0)
    for _ in range(3):
        log.append_from_client(batch(b"a", b"b"), now_ms=NOW)
    assert log.delete_records(3) == 3
    assert log.log_start_offset == 3
    assert [b.base_offset for b in log.batches] == [2, 4]
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 3
    assert log.read(3, 10**6).batches[0].base_offset == 2  # whole batch holding offset 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(7)
    assert log.delete_records(-1) == 6
    assert log.batches == () and log.log_end_offset == 6
    assert log.read(6, 100).records == b""


def test_duplicate_from_the_seam_answers_original_offsets() -> None:
    class Tracker(ProducerStateTracker):
        def validate(self, log, header, now_ms):
            if header.base_sequence == 0 and log.log_end_offset > 0:
                raise DuplicateBatch(0, 1, 1234)

        def on_append(self, log, stored, now_ms):
            pass

    log = PartitionLog("t", 0, producer_state=Tracker())
    data = r.build_batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append_from_client(data, now_ms=NOW)
    again = log.append_from_client(data, now_ms=NOW)
    assert (first.base_offset, first.last_offset) == (again.base_offset, again.last_offset) == (0, 1)
    assert again.log_append_time == 1234 and again.record_count == 2 and again.log_start_offset == 0
    assert log.log_end_offset == 2 and len(log.batches) == 1


def test_marker_seam_attach_validate_on_marker_and_tick() -> None:
    calls = []

    class Tracker(ProducerStateTracker):
        def attach(self, log):
            calls.append(("attach", log.name))

        def validate(self, log, header, now_ms):
            pass

        def on_append(self, log, stored, now_ms):
            calls.append(("append", stored.base_offset, stored.is_control))

        def validate_marker(self, log, producer_id, producer_epoch, coordinator_epoch, transaction_version):
            calls.append(("validate_marker", producer_id, producer_epoch, coordinator_epoch, transaction_version))
            if producer_epoch < 0:
                raise LogError("stale", ErrorCode.invalid_producer_epoch)

        def on_marker(self, producer_id, producer_epoch, committed, coordinator_epoch, *, timestamp_ms=None):
            calls.append(("on_marker", producer_id, producer_epoch, committed, coordinator_epoch, timestamp_ms))

        def tick(self, now_ms):
            calls.append(("tick", now_ms))

    log = PartitionLog("t", 3, producer_state=Tracker())
    log.append_stored(r.build_batch([b"x"], producer_id=5, producer_epoch=1, base_sequence=0, transactional=True), now_ms=NOW)
    log.append_marker(r.ControlType.COMMIT, producer_id=5, producer_epoch=2, coordinator_epoch=4, now_ms=NOW + 1,
                      transaction_version=2)
    with pytest.raises(LogError) as exc:
        log.append_marker(r.ControlType.ABORT, producer_id=5, producer_epoch=-5, coordinator_epoch=4, now_ms=NOW)
    assert exc.value.error_code == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == 2  # the refused marker was not written
    log.tick(NOW + 2)
    assert calls == [
        ("attach", "t-3"),
        ("append", 0, False),  # control batches do not reach on_append
        ("validate_marker", 5, 2, 4, 2),
        ("on_marker", 5, 2, True, 4, NOW + 1),
        ("validate_marker", 5, -5, 4, None),
        ("tick", NOW + 2),
    ]


def test_untracked_producers_accept_markers_and_ticks() -> None:
    log = PartitionLog("t", 0)
    log.append_marker(r.ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=0, now_ms=NOW)
    log.tick(NOW)
    assert log.log_end_offset == 1 and log.ongoing_transactions == {}
