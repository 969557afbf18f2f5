"""The reference transactional producer and read_committed consumer against real Kafka.

Two clusters, each started once for this module: `kafka-native` (4.4.0, finalized
transaction.version=2, so the producer speaks TV2: no AddPartitionsToTxn, EndTxn v5 with an
epoch bump per transaction, TxnOffsetCommit v5) and `kafka-native:3.9` (3.9.2, TV1 only:
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn <= v4, one epoch for the producer's life).
Visibility is checked with the reference consumer and with confluent-kafka (librdkafka) at
isolation.level=read_committed; committed offsets with OffsetFetch.

Transaction markers are written asynchronously after EndTxn answers, so checks that read
right after a commit/abort first wait for the last stable offset to catch up with the high
watermark (or for OffsetFetch(require_stable) to stop answering UNSTABLE_OFFSET_COMMIT).
"""

from __future__ import annotations

import time
import uuid

import pytest

from clients import wire
from targets.factory import create_target
from reference_impl.client.consumer import READ_COMMITTED, READ_UNCOMMITTED, Consumer
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.transactional_producer import (
    AbortableTxnError,
    FatalTxnError,
    GroupMetadata,
    IllegalTxnStateError,
    ProducerFencedError,
    TransactionalProducer,
    TxnState,
    UnsupportedTxnVersionError,
)
from kio.schema.errors import ErrorCode

SPECS = {"kafka-native": 2, "kafka-native:3.9": 1}  # spec -> transaction version in use
UNSTABLE_OFFSET_COMMIT = ErrorCode.unstable_offset_commit


@pytest.fixture(scope="module", params=[pytest.param("kafka-native", id="kafka-4.4-tv2"),
                                        pytest.param("kafka-native:3.9", id="kafka-3.9-tv1", marks=pytest.mark.nightly)])
def kafka(request):
    with create_target(request.param) as target:
        target.expected_tv = SPECS[request.param]  # type: ignore[attr-defined]
        yield target


@pytest.fixture(scope="module")
def admin(kafka):
    with ClusterClient(kafka.bootstrap_servers) as cc:
        yield cc


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def topic(admin):
    name = uid("txn")
    assert wire.create_topic(admin, name, partitions=2, replication=1) == 0
    return name


@pytest.fixture()
def make_producer(kafka):
    made: list[TransactionalProducer] = []

    def make(transactional_id: str | None = None, **kwargs) -> TransactionalProducer:
        p = TransactionalProducer(kafka.bootstrap_servers, transactional_id or uid("tid"), **kwargs)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def wait_stable(bootstrap: str, topic: str, partitions=(0, 1), timeout_s: float = 30.0) -> None:
    """Until the LSO equals the high watermark on each partition (markers written)."""
    with Consumer(bootstrap, READ_COMMITTED) as rc, Consumer(bootstrap, READ_UNCOMMITTED) as ru:
        deadline = time.monotonic() + timeout_s
        for p in partitions:
            while rc.end_offset((topic, p)) != ru.end_offset((topic, p)):
                assert time.monotonic() < deadline, f"LSO of {topic}-{p} did not reach the high watermark"
                time.sleep(0.05)


def read_values(bootstrap: str, topic: str, level: str, partitions=(0, 1)) -> list[bytes]:
    with Consumer(bootstrap, level) as c:
        c.assign([(topic, p) for p in partitions])
        return [r.value for r in c.consume_to_end()]


def confluent_read_committed(bootstrap: str, topic: str, until: set[bytes], partitions=(0, 1), timeout_s: float = 30.0) -> list[bytes]:
    """librdkafka at read_committed from the beginning until every value of `until` showed up
    (put them last in their partitions: everything before them has then been read)."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition

    c = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uid("ck"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while not until <= set(out):
            assert time.monotonic() < deadline, f"confluent-kafka did not see {until!r}; got {out}"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append(m.value())
        return out
    finally:
        c.close()


def requests_of(p: TransactionalProducer) -> list[tuple[str, int, str | None]]:
    return [(e["api"], e["version"], e["error"]) for e in p.history if e["type"] == "request"]


def offset_fetch_stable(admin: ClusterClient, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    gc = admin.coordinator_for(group, 0, wait_s=10)
    deadline = time.monotonic() + timeout_s
    while True:
        got = wire.offset_fetch(gc, group, topic, [0, 1], require_stable=True)
        if all(code != UNSTABLE_OFFSET_COMMIT for _, _, code in got.values()):
            assert all(code == 0 for _, _, code in got.values()), got
            return {p: off for p, (off, _, _) in got.items()}
        assert time.monotonic() < deadline, f"offsets still unstable: {got}"
        time.sleep(0.05)


# --- tests -------------------------------------------------------------------------------------


def test_transaction_version_follows_the_cluster(kafka, make_producer):
    p = make_producer()
    assert p.state is TxnState.UNINITIALIZED and p.producer_id_and_epoch == (-1, -1)
    p.init_transactions()
    assert p.state is TxnState.READY
    assert p.transaction_version == kafka.expected_tv
    assert p.finalized_transaction_version == (2 if kafka.expected_tv == 2 else 0)
    assert p.producer_id >= 0 and p.producer_epoch >= 0
    apis = [a for a, _, err in requests_of(p) if err is None]
    assert apis[-1] == "InitProducerId"


def test_commit_is_visible_at_read_committed(kafka, topic, make_producer):
    bs = kafka.bootstrap_servers
    p = make_producer()
    p.init_transactions()
    p.begin_transaction()
    for i in range(5):
        p.send(topic, i % 2, f"c{i}", key=f"k{i}", headers=[("h", b"v")])
    p.flush()
    # Written but not committed: visible only at read_uncommitted; the LSO holds read_committed back.
    assert sorted(read_values(bs, topic, "read_uncommitted")) == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    assert read_values(bs, topic, "read_committed") == []
    p.commit_transaction()
    assert p.state is TxnState.READY
    wait_stable(bs, topic)
    with Consumer(bs, "read_committed") as c:
        c.assign([(topic, 0), (topic, 1)])
        got = c.consume_to_end()
    assert sorted(r.value for r in got) == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    assert all(r.transactional and r.producer_id == p.producer_id for r in got)
    assert {r.key for r in got} == {b"k0", b"k1", b"k2", b"k3", b"k4"}
    assert all(r.headers == (("h", b"v"),) for r in got)
    assert sorted(confluent_read_committed(bs, topic, {b"c3", b"c4"})) == [b"c0", b"c1", b"c2", b"c3", b"c4"]


def test_abort_is_invisible_at_read_committed(kafka, topic, make_producer):
    bs = kafka.bootstrap_servers
    p = make_producer()
    p.init_transactions()
    p.begin_transaction()
    for i in range(4):
        p.send(topic, i % 2, f"a{i}")
    p.flush()
    p.abort_transaction()
    assert p.state is TxnState.READY
    p.begin_transaction()
    p.send(topic, 0, "after")
    p.send(topic, 1, "after1")
    p.commit_transaction()
    wait_stable(bs, topic)
    with Consumer(bs, "read_committed") as c:
        c.assign([(topic, 0), (topic, 1)])
        committed = c.consume_to_end()
    assert sorted(r.value for r in committed) == [b"after", b"after1"]
    # The broker listed the aborted transaction on both partitions and the client dropped
    # its batches (one per partition) and stepped over the markers (abort + commit).
    assert all(c.aborted_transactions_seen[(topic, part)] for part in (0, 1))
    assert c.skipped_aborted == {(topic, 0): 1, (topic, 1): 1}
    assert c.skipped_control == {(topic, 0): 2, (topic, 1): 2}
    uncommitted = read_values(bs, topic, "read_uncommitted")
    assert sorted(uncommitted) == [b"a0", b"a1", b"a2", b"a3", b"after", b"after1"]
    ck = confluent_read_committed(bs, topic, {b"after", b"after1"})
    assert sorted(ck) == [b"after", b"after1"], ck


def test_epoch_and_sequences_per_transaction(kafka, topic, make_producer):
    bs = kafka.bootstrap_servers
    p = make_producer()
    p.init_transactions()
    pid, epoch0 = p.producer_id_and_epoch
    epochs, base_sequences = [], []
    for i in range(3):
        p.begin_transaction()
        p.send(topic, 0, f"e{i}a")
        p.send(topic, 0, f"e{i}b")
        p.flush()
        base_sequences.append(p.produced[-1].base_sequence)
        epoch_used = p.producer_epoch
        if i == 1:
            p.abort_transaction()
        else:
            p.commit_transaction()
        epochs.append((epoch_used, p.producer_epoch))
    reqs = requests_of(p)
    if kafka.expected_tv == 2:
        # EndTxn v5 answers the bumped epoch after every commit and abort; sequences restart.
        assert epochs == [(epoch0, epoch0 + 1), (epoch0 + 1, epoch0 + 2), (epoch0 + 2, epoch0 + 3)]
        assert base_sequences == [0, 0, 0]
        assert p.producer_id == pid
        assert not any(api in ("AddPartitionsToTxn", "AddOffsetsToTxn") for api, _, _ in reqs)
        assert {v for api, v, _ in reqs if api == "EndTxn"} == {5}
        assert min(v for api, v, _ in reqs if api == "Produce") >= 12
    else:
        assert epochs == [(epoch0, epoch0)] * 3
        assert base_sequences == [0, 2, 4]
        assert [api for api, _, err in reqs if err is None].count("AddPartitionsToTxn") == 3
        assert max(v for api, v, _ in reqs if api == "EndTxn") <= 4
        assert max(v for api, v, _ in reqs if api == "Produce") <= 11
    # The history hook saw each batch's producer id, epoch and base sequence.
    # (a Produce answered with a retriable error is resent with the same sequence: count the
    # acknowledged ones)
    batches = [
        e["batch"] for e in p.history if e["type"] == "request" and e["api"] == "Produce" and e["error"] is None
    ]
    assert [(b["producer_epoch"], b["base_sequence"], b["record_count"]) for b in batches] == [
        (epochs[i][0], base_sequences[i], 2) for i in range(3)
    ]
    # The epochs on the stored batches are the ones the producer used.
    wait_stable(bs, topic, partitions=(0,))
    with Consumer(bs, "read_uncommitted") as c:
        c.assign([(topic, 0)])
        stored = {r.value: r.producer_epoch for r in c.consume_to_end()}
    assert stored == {f"e{i}{x}".encode(): epochs[i][0] for i in range(3) for x in "ab"}
    # The history hook saw every transition, in order.
    transitions = [(e["from"], e["to"]) for e in p.history if e["type"] == "transition"]
    assert transitions[:3] == [("Uninitialized", "Initializing"), ("Initializing", "Ready"), ("Ready", "InTransaction")]
    assert ("InTransaction", "AbortingTransaction") in transitions


def test_empty_transaction_completes_without_end_txn(kafka, make_producer):
    p = make_producer()
    p.init_transactions()
    before = p.producer_id_and_epoch
    p.begin_transaction()
    p.commit_transaction()
    assert p.state is TxnState.READY and p.producer_id_and_epoch == before
    assert "EndTxn" not in [api for api, _, _ in requests_of(p)]


def test_fenced_producer_fails_fatally_on_commit(kafka, topic, make_producer):
    bs = kafka.bootstrap_servers
    tid = uid("fence")
    p1 = make_producer(tid)
    p1.init_transactions()
    p1.begin_transaction()
    p1.send(topic, 0, "zombie")
    p1.flush()
    p2 = make_producer(tid)
    p2.init_transactions()  # aborts p1's open transaction and bumps the epoch
    assert p2.producer_id == p1.producer_id and p2.producer_epoch > p1.producer_epoch
    with pytest.raises(ProducerFencedError) as exc:
        p1.commit_transaction()
    assert exc.value.error_code in (47, 90)
    assert p1.state is TxnState.FATAL_ERROR
    for call in (p1.begin_transaction, p1.abort_transaction, p1.commit_transaction, p1.flush):
        with pytest.raises(FatalTxnError):
            call()
    with pytest.raises(FatalTxnError):
        p1.send(topic, 0, "more")
    with pytest.raises(FatalTxnError):
        p1.send_offsets_to_transaction({(topic, 0): 1}, GroupMetadata(uid("g")))
    # The new producer works; the zombie's record stays invisible.
    p2.begin_transaction()
    p2.send(topic, 0, "fresh")
    p2.commit_transaction()
    wait_stable(bs, topic, partitions=(0,))
    assert read_values(bs, topic, "read_committed", partitions=(0,)) == [b"fresh"]


def test_fenced_producer_send_path(kafka, topic, make_producer):
    """The fenced producer's next produce fails. TV1: its AddPartitionsToTxn meets
    PRODUCER_FENCED (fatal). TV2: the leader answers INVALID_PRODUCER_EPOCH, abortable as in
    Kafka's producer (KIP-588); the abort then reaches the coordinator, which fences (fatal)."""
    tid = uid("fence")
    p1 = make_producer(tid)
    p1.init_transactions()
    p1.begin_transaction()
    p1.send(topic, 1, "first")
    p1.commit_transaction()
    p1.begin_transaction()
    make_producer(tid).init_transactions()
    p1.send(topic, 1, "zombie")
    if kafka.expected_tv == 2:
        with pytest.raises(AbortableTxnError) as exc:
            p1.flush()
        assert exc.value.error_code == ErrorCode.invalid_producer_epoch
        assert p1.state is TxnState.ABORTABLE_ERROR
        with pytest.raises(AbortableTxnError):
            p1.commit_transaction()
        with pytest.raises(ProducerFencedError):
            p1.abort_transaction()
    else:
        with pytest.raises(ProducerFencedError):
            p1.flush()
    assert p1.state is TxnState.FATAL_ERROR
    with pytest.raises(FatalTxnError):
        p1.begin_transaction()


def test_send_offsets_visible_only_after_commit(kafka, admin, topic, make_producer):
    p = make_producer()
    p.init_transactions()
    group = uid("grp")
    gc = admin.coordinator_for(group, 0, wait_s=10)

    # Aborted: the offsets never become visible.
    p.begin_transaction()
    p.send(topic, 0, "x")
    p.send_offsets_to_transaction({(topic, 0): 11, (topic, 1): 12}, GroupMetadata(group))
    p.abort_transaction()
    assert offset_fetch_stable(admin, group, topic) == {0: -1, 1: -1}

    # Committed: pending until the commit, then visible.
    p.begin_transaction()
    p.send(topic, 0, "y")
    p.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): (7, "meta")}, GroupMetadata(group))
    pending = wire.offset_fetch(gc, group, topic, [0, 1])
    assert {part: off for part, (off, _, _) in pending.items()} == {0: -1, 1: -1}
    stable = wire.offset_fetch(gc, group, topic, [0, 1], require_stable=True)
    assert {code for _, _, code in stable.values()} == {UNSTABLE_OFFSET_COMMIT}
    p.commit_transaction()
    assert offset_fetch_stable(admin, group, topic) == {0: 5, 1: 7}
    meta = wire.offset_fetch(gc, group, topic, [1])[1][1]
    assert meta == "meta"
    reqs = [api for api, _, err in requests_of(p) if err is None]
    if kafka.expected_tv == 2:
        assert "AddOffsetsToTxn" not in reqs
        assert {v for api, v, _ in requests_of(p) if api == "TxnOffsetCommit"} == {5}
    else:
        assert reqs.count("AddOffsetsToTxn") == 2
        assert max(v for api, v, _ in requests_of(p) if api == "TxnOffsetCommit") <= 4


def test_forced_transaction_version(kafka, topic, make_producer):
    bs = kafka.bootstrap_servers
    if kafka.expected_tv == 2:
        # A TV1 client on a TV2 cluster: Kafka completes its transactions the TV1 way.
        p = make_producer(transaction_version=1)
        p.init_transactions()
        assert p.transaction_version == 1
        epoch = p.producer_epoch
        for i in range(2):
            p.begin_transaction()
            p.send(topic, 0, f"v1-{i}")
            p.commit_transaction()
        assert p.producer_epoch == epoch
        reqs = requests_of(p)
        assert "AddPartitionsToTxn" in [api for api, _, _ in reqs]
        assert max(v for api, v, _ in reqs if api == "EndTxn") <= 4
        wait_stable(bs, topic, partitions=(0,))
        assert read_values(bs, topic, "read_committed", partitions=(0,)) == [b"v1-0", b"v1-1"]
    else:
        p = make_producer(transaction_version=2)
        with pytest.raises(UnsupportedTxnVersionError):
            p.init_transactions()
        assert p.state is TxnState.FATAL_ERROR


def test_api_misuse_is_refused_without_changing_state(kafka, topic, make_producer):
    p = make_producer()
    with pytest.raises(IllegalTxnStateError):
        p.begin_transaction()
    with pytest.raises(IllegalTxnStateError):
        p.send(topic, 0, "x")
    assert p.state is TxnState.UNINITIALIZED
    p.init_transactions()
    with pytest.raises(IllegalTxnStateError):
        p.commit_transaction()
    with pytest.raises(IllegalTxnStateError):
        p.send_offsets_to_transaction({(topic, 0): 1}, GroupMetadata(uid("g")))
    with pytest.raises(IllegalTxnStateError):
        p.init_transactions()
    assert p.state is TxnState.READY
    p.begin_transaction()
    with pytest.raises(IllegalTxnStateError):
        p.begin_transaction()
    assert p.state is TxnState.IN_TRANSACTION
    p.abort_transaction()
    assert p.state is TxnState.READY


def test_abortable_error_then_abort_recovers(kafka, admin, make_producer):
    """A record the partition refuses (MESSAGE_TOO_LARGE) is an abortable error: commit is
    refused, abort recovers with an epoch bump. TV1: the client bumps it itself with
    InitProducerId(its id and epoch) after EndTxn; TV2: EndTxn v5 returns the bumped epoch."""
    bs = kafka.bootstrap_servers
    small = uid("small")
    assert wire.create_topic(admin, small, 1, 1, configs={"max.message.bytes": "1024"}) == 0
    p = make_producer()
    p.init_transactions()
    pid, epoch = p.producer_id_and_epoch
    p.begin_transaction()
    p.send(small, 0, "ok")
    p.send(small, 0, b"x" * 4096)
    with pytest.raises(AbortableTxnError) as exc:
        p.commit_transaction()
    assert exc.value.error_code == ErrorCode.message_too_large
    assert p.state is TxnState.ABORTABLE_ERROR
    with pytest.raises(AbortableTxnError):
        p.send(small, 0, "refused")
    with pytest.raises(AbortableTxnError):
        p.commit_transaction()
    p.abort_transaction()
    assert p.state is TxnState.READY
    assert p.producer_id_and_epoch == (pid, epoch + 1)
    reqs = requests_of(p)
    last_end = max(i for i, r in enumerate(reqs) if r[0] == "EndTxn")
    after = [api for api, _, _ in reqs[last_end + 1 :]]
    if kafka.expected_tv == 1:
        # (InitProducerId may first meet CONCURRENT_TRANSACTIONS while the markers are written)
        assert set(after) == {"InitProducerId"}
        assert [err for _, _, err in reqs[last_end + 1 :]][-1] is None
        bump = [e for e in p.history if e["type"] == "request" and e["api"] == "InitProducerId"][-1]
        assert (bump["request"]["producer_id"], bump["request"]["producer_epoch"]) == (pid, epoch)
        transitions = [(e["from"], e["to"]) for e in p.history if e["type"] == "transition"]
        assert transitions[-2:] == [("AbortingTransaction", "Initializing"), ("Initializing", "Ready")]
    else:
        assert after == []
    # The producer is usable again.
    p.begin_transaction()
    p.send(small, 0, "again")
    p.commit_transaction()
    wait_stable(bs, small, partitions=(0,))
    assert read_values(bs, small, "read_committed", partitions=(0,)) == [b"again"]
    # The refused batch was split (as Kafka's sender does): "ok" was written, then aborted.
    assert read_values(bs, small, "read_uncommitted", partitions=(0,)) == [b"ok", b"again"]


def test_send_offsets_with_group_metadata(kafka, admin, topic, make_producer):
    """KIP-447: TxnOffsetCommit carries the consumer's generation and member id; a stale
    generation (a zombie) is refused with ILLEGAL_GENERATION, an abortable error."""
    group = uid("cg")
    gc = admin.coordinator_for(group, 0, wait_s=10)
    joined = wire.join_group(gc, group, topic=topic)
    assert joined.error_code == ErrorCode.none, joined
    synced = wire.sync_group(gc, group, joined.generation_id, joined.member_id, {joined.member_id: b""})
    assert synced.error_code == ErrorCode.none, synced
    meta = GroupMetadata(group, int(joined.generation_id), joined.member_id, None)
    p = make_producer()
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, 0, "m")
    p.send_offsets_to_transaction({(topic, 0): 3}, meta)
    p.commit_transaction()
    assert offset_fetch_stable(admin, group, topic)[0] == 3
    sent = [e for e in p.history if e["type"] == "request" and e["api"] == "TxnOffsetCommit"][-1]["request"]
    assert (sent["generation_id"], sent["member_id"]) == (meta.generation_id, meta.member_id)

    p.begin_transaction()
    p.send(topic, 0, "n")
    stale = GroupMetadata(group, meta.generation_id + 1, meta.member_id)
    with pytest.raises(AbortableTxnError) as exc:
        p.send_offsets_to_transaction({(topic, 0): 9}, stale)
    assert exc.value.error_code == ErrorCode.illegal_generation
    assert p.state is TxnState.ABORTABLE_ERROR
    p.abort_transaction()
    assert p.state is TxnState.READY
    assert offset_fetch_stable(admin, group, topic)[0] == 3
