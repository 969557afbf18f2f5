"""KIP-98 WriteTxnMarkers (key 27) sent straight to a partition leader, as a transaction
coordinator does: the marker type is a boolean (true = COMMIT, false = ABORT), a marker
carrying a coordinator epoch older than the one a partition has seen for the producer is
refused (TRANSACTION_COORDINATOR_FENCED, the leader's guard against a replaced
coordinator, Kafka's ProducerAppendInfo.checkCoordinatorEpoch) and the answer has one error
code per producer id and partition.

The markers are written for fresh idempotent producer ids with no transaction of their
own, so no real coordinator ever competes with them. Without an authorizer any client may
send WriteTxnMarkers (Kafka asks CLUSTER_ACTION only when ACLs are on).
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients import wire
from clients.txn import init_producer_id_settled
from conformance.suites import require_api
from conformance.suites.kip98 import INIT_PRODUCER_ID, create_ready_topic, fetch_all, log_end
from conformance.suites.kip98.test_fencing import batch_summary
from clients.wire import Req
from reference_impl.protocol.api_keys import ApiKey

WRITE_TXN_MARKERS = ApiKey.WRITE_TXN_MARKERS
COORDINATOR_EPOCH = 7  # any epoch: the partition has seen none for these producers
UNKNOWN_PARTITION = 7  # the topic has 2 partitions


def write_markers(leader, markers: list[tuple[int, int, bool, int, dict[str, list[int]]]]) -> dict[int, dict[tuple[str, int], int]]:
    """One WriteTxnMarkers (v1+): markers are (producer id, epoch, commit?, coordinator epoch,
    {topic: partitions}); returns {producer id: {(topic, partition): error}}."""
    r = Req(leader, WRITE_TXN_MARKERS, 2, lowest=1)
    resp = r.send(markers=tuple(
        r.part("WritableTxnMarker", producer_id=pid, producer_epoch=epoch, transaction_result=commit,
               coordinator_epoch=coord_epoch, transaction_version=0,
               topics=tuple(r.part("WritableTxnMarkerTopic", name=t, partition_indexes=tuple(ps))
                            for t, ps in topics.items()))
        for pid, epoch, commit, coord_epoch, topics in markers
    ))
    return {
        int(m.producer_id): {(t.name, int(p.partition_index)): int(p.error_code) for t in m.topics for p in t.partitions}
        for m in resp.markers
    }


def _require_markers(target) -> None:
    caps = target.capabilities()
    require_api(caps, INIT_PRODUCER_ID, what="InitProducerId")
    require_api(caps, WRITE_TXN_MARKERS, what="WriteTxnMarkers")


def _new_pid(cc) -> tuple[int, int]:
    _, resp = init_producer_id_settled(cc, None)
    assert int(resp.error_code) == 0, f"InitProducerId answered {int(resp.error_code)}"
    return int(resp.producer_id), int(resp.producer_epoch)


def _markers_of(cc, topic: str, partition: int, pids: dict[int, str]) -> list[list[Any]]:
    """[(producer label, marker type)] of the control batches of the given producers, in log order."""

    data = fetch_all(cc, cc.leader_for(topic, partition), topic, partition)["records"]
    return [[pids[b["producer_id"]], b["marker"]] for b in batch_summary(data)
            if b["control"] and b["producer_id"] in pids]


def marker_scenario(target, ids) -> dict[str, Any]:
    """Producer A gets a COMMIT (true) and B an ABORT (false) on partition 0 in one request;
    then A is sent an older coordinator epoch (fenced, nothing written), the same epoch and a
    newer one (both written); finally one request names partition 1 and a partition that
    does not exist."""
    _require_markers(target)
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, partitions=2)
        (a, ea), (b, eb) = _new_pid(cc), _new_pid(cc)
        leader = cc.leader_for(topic, 0)
        both = write_markers(leader, [(a, ea, True, COORDINATOR_EPOCH, {topic: [0]}),
                                      (b, eb, False, COORDINATOR_EPOCH, {topic: [0]})])
        end_before = log_end(leader, topic, 0)
        older = write_markers(leader, [(a, ea, True, COORDINATOR_EPOCH - 1, {topic: [0]})])
        end_after_older = log_end(leader, topic, 0)
        same = write_markers(leader, [(a, ea, False, COORDINATOR_EPOCH, {topic: [0]})])
        newer = write_markers(leader, [(a, ea, True, COORDINATOR_EPOCH + 1, {topic: [0]})])
        mixed = write_markers(cc.leader_for(topic, 1), [(a, ea, True, COORDINATOR_EPOCH, {topic: [1, UNKNOWN_PARTITION]})])
        p0 = _markers_of(cc, topic, 0, {a: "A", b: "B"})
        p1 = _markers_of(cc, topic, 1, {a: "A", b: "B"})
    return {
        "first": {"A": both.get(a), "B": both.get(b)} if both else None,
        "older_epoch": older.get(a), "log_grew_on_fenced": end_after_older != end_before,
        "same_epoch": same.get(a), "newer_epoch": newer.get(a),
        "mixed": mixed.get(a), "partition0": p0, "partition1": p1,
    }


def _code(errors: dict | None, topic_partition: tuple[str, int]) -> int | None:
    return None if errors is None else errors.get(topic_partition)


@pytest.mark.requirement("KIP-98.MARKER.003")
def test_marker_type_is_a_boolean_true_commit_false_abort(differential):
    """KIP-98.MARKER.003: TransactionResult true writes COMMIT, false writes ABORT."""
    obs = differential.run(marker_scenario, ignore_keys=["first", "older_epoch", "same_epoch", "newer_epoch", "mixed"]).target
    first = obs["first"]
    assert first is not None and all(set(v.values()) == {0} for v in first.values()), f"markers refused: {obs}"
    assert obs["partition0"][:2] == [["A", "COMMIT"], ["B", "ABORT"]], (
        f"TransactionResult true must write a COMMIT and false an ABORT control record: {obs['partition0']}")


@pytest.mark.requirement("KIP-98.MARKER.002")
def test_marker_from_an_older_coordinator_epoch_is_fenced(differential):
    """KIP-98.MARKER.002: the leader keeps the last coordinator epoch per producer; an older one is refused
    with TRANSACTION_COORDINATOR_FENCED and writes nothing; the same or a newer one is taken."""
    obs = differential.run(marker_scenario, ignore_keys=["first", "mixed", "partition1"]).target
    older = list((obs["older_epoch"] or {}).values())
    assert older == [ErrorCode.transaction_coordinator_fenced], f"older coordinator epoch answered {obs['older_epoch']}"
    assert not obs["log_grew_on_fenced"], "a fenced marker was appended"
    assert list(obs["same_epoch"].values()) == [0] and list(obs["newer_epoch"].values()) == [0], obs
    assert obs["partition0"] == [["A", "COMMIT"], ["B", "ABORT"], ["A", "ABORT"], ["A", "COMMIT"]], obs["partition0"]


@pytest.mark.requirement("KIP-98.MARKER.004")
def test_marker_response_has_an_error_per_producer_and_partition(differential):
    """KIP-98.MARKER.004: NONE for the known partition, an error for the unknown one, in one answer."""
    obs = differential.run(marker_scenario, ignore_keys=["first", "older_epoch", "same_epoch", "newer_epoch",
                                                         "partition0"]).target
    mixed = obs["mixed"]
    assert mixed is not None and len(mixed) == 2, f"one result per partition expected: {mixed}"
    by_partition = {p: code for (_, p), code in mixed.items()}
    assert by_partition[1] == 0, f"the known partition's marker was refused: {mixed}"
    assert by_partition[UNKNOWN_PARTITION] in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower), (
        f"the unknown partition answered {by_partition[UNKNOWN_PARTITION]}")
    assert obs["partition1"] == [["A", "COMMIT"]], "the good partition's marker must be written despite the bad one"


def producer_epoch_scenario(target, ids) -> dict[str, Any]:
    """A marker at producer epoch e+1 is written; one at e after it must not be."""
    _require_markers(target)
    topic = ids.topic()
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        pid, epoch = _new_pid(cc)
        leader = cc.leader_for(topic, 0)
        newer = write_markers(leader, [(pid, epoch + 1, True, COORDINATOR_EPOCH, {topic: [0]})])
        end_before = log_end(leader, topic, 0)
        older = write_markers(leader, [(pid, epoch, False, COORDINATOR_EPOCH, {topic: [0]})])
        end_after = log_end(leader, topic, 0)
        markers = _markers_of(cc, topic, 0, {pid: "P"})
    return {"newer": list(newer.get(pid, {}).values()), "older": list(older.get(pid, {}).values()),
            "log_grew_on_older": end_after != end_before, "markers": markers}


@pytest.mark.requirement("KIP-98.MARKER.006")
def test_marker_with_an_older_producer_epoch_is_refused(differential):
    """KIP-98.MARKER.006: a marker for a fenced producer epoch ends nothing and appends nothing."""
    obs = differential.run(producer_epoch_scenario).target
    assert obs["newer"] == [0], f"a marker at a newer producer epoch was refused: {obs}"
    assert obs["older"] in ([ErrorCode.invalid_producer_epoch], [ErrorCode.producer_fenced]), (
        f"a marker at an older producer epoch answered {obs['older']}")
    assert not obs["log_grew_on_older"] and obs["markers"] == [["P", "COMMIT"]], obs
