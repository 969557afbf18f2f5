"""KIP-98 durability across a broker crash, with interesting state at the crash.

* Two transactions open at the crash of their (shared) coordinator, each spanning several
  batches on two partitions: one with a short timeout, which the rebuilt coordinator must
  abort (or the old one did before the crash), one with a long timeout, which the producer
  commits after the restart. Each is all-or-nothing on both partitions, never half
  visible (TXN.001), and the rebuilt coordinator finishes them from the transaction log
  (COORD.004, TIMEOUT.001).
* A read_committed fetch that starts inside an aborted multi-batch transaction, after the
  crash of the partition's leader (the aborted-transaction index rebuilt from the log): the
  same reads and oracle as test_visibility's test without a crash.
* A transaction decided (EndTxn answered, Prepare* written) while the only replica of its
  partition is down, then its coordinator crashes: the next coordinator finishes it from the
  transaction log once the replica is back (COORD.004). Three brokers; no reference knob: the
  marker is held by the dead replica, on any target that can kill and restart a node (Kafka
  drops that marker instead: DEV-653).

On the reference a node kill is a crash (the coordinator's cache is lost and replayed from
the transaction log); on kafka-native it is a SIGKILL of the broker. Targets that cannot
restart a node are not supported.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients import wire
from clients.errors import TXN_SETTLING
from clients.txn import add_partitions_ok, end_txn, init_ok, produce_txn_ok
from conformance.suites import require_api, require_nodes
from conformance.suites.kip98 import (
    create_ready_topic, idem_batch, plain_batch, require_transactions, values, wait_stable,
)
from conformance.suites.kip98.test_coordinator_failover import _coordinator_node
from conformance.suites.kip98.test_fencing import DESCRIBE_TRANSACTIONS, NONE, committed_values
from conformance.suites.kip98.test_txn_admin import describe
from conformance.suites.kip98.test_visibility import (
    ABORTED_INSIDE_END, assert_aborted_inside_dropped, read_from_inside, write_aborted_inside,
)

SHORT_TIMEOUT_MS = 20_000  # aborted by the coordinator (the rebuilt one, if the crash came first)
LONG_TIMEOUT_MS = 300_000  # outlives a loaded broker restart (see test_coordinator_failover)
RESOLVE_WAIT_S = 180.0  # restart + __transaction_state load + abort scan on a loaded 2-core machine
PARTS = (0, 1)


def _same_coordinator_tids(cc, unique) -> tuple[str, str, int]:
    """Two fresh transactional ids with the same coordinator node (one crash hits both)."""
    by_node: dict[int, str] = {}
    for _ in range(40):
        tid = unique.transactional_id()
        node, _ = _coordinator_node(cc, tid, 30)
        if node in by_node:
            return by_node[node], tid, node
        by_node[node] = tid
    raise AssertionError(f"40 transactional ids, no two on one coordinator: {by_node}")


def _open_txn(cc, tid: str, topic: str, prefix: str, timeout_ms: int) -> tuple[int, int, dict[int, list[str]]]:
    """A transaction of three batches on each of PARTS, left open. Returns pid, epoch, values."""
    coord, init, _ = init_ok(cc, tid, timeout_ms=timeout_ms)
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    add_partitions_ok(coord, tid, pid, epoch, topic, list(PARTS))
    written: dict[int, list[str]] = {}
    for p in PARTS:
        seq = 0
        for b in range(3):
            vals = values(f"{prefix}-p{p}-b{b}-", 2)
            produce_txn_ok(cc.leader_for(topic, p), tid, topic, p, idem_batch(vals, pid, epoch, seq, True))
            seq += len(vals)
            written.setdefault(p, []).extend(vals)
    return pid, epoch, written


def _commit_after_restart(target, tid: str, pid: int, epoch: int) -> tuple[int | str, list]:
    """EndTxn(commit) through the retriable answers of a restarting coordinator."""
    seen: list = []
    deadline = time.monotonic() + RESOLVE_WAIT_S
    with wire.cluster_client(target) as cc:
        while True:
            try:
                _, node = _coordinator_node(cc, tid, 10)
                code: int | str = int(end_txn(node, tid, pid, epoch, True)[1].error_code)
            except (OSError, ConnectionError, EOFError, AssertionError) as exc:
                code = f"io:{type(exc).__name__}"
            if code == NONE or (isinstance(code, int) and code not in TXN_SETTLING) or time.monotonic() > deadline:
                return code, seen
            seen.append(code)
            time.sleep(0.1)


def stable_after_restart(target, topic: str, partition: int, at_least: int = 0) -> tuple[int, int]:
    """wait_stable through a restarting leader: until it serves the partition again its
    ListOffsets answers NOT_LEADER_OR_FOLLOWER (seen on testcontainers under CI load), so
    the metadata and the leader are looked up again until RESOLVE_WAIT_S has passed."""
    deadline = time.monotonic() + RESOLVE_WAIT_S
    while True:
        try:
            with wire.cluster_client(target) as cc:
                left = max(1.0, deadline - time.monotonic())
                return wait_stable(cc.leader_for(topic, partition), topic, partition, at_least=at_least, timeout_s=left)
        except (RuntimeError, LookupError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def open_transactions_crash_scenario(target, unique) -> dict[str, Any]:
    topic = unique.topic()
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, partitions=len(PARTS))
        for p in PARTS:
            wire.produce(cc.leader_for(topic, p), topic, p, plain_batch([f"before-p{p}"]))
        short_tid, long_tid, node = _same_coordinator_tids(cc, unique)
        long_pid, long_epoch, obs["long"] = _open_txn(cc, long_tid, topic, "long", LONG_TIMEOUT_MS)
        t0 = time.monotonic()  # the short one last: its timeout should run out after the crash
        _, _, obs["short"] = _open_txn(cc, short_tid, topic, "short", SHORT_TIMEOUT_MS)
        obs["committed_while_open"] = {p: committed_values(cc, topic, p) for p in PARTS}
    obs["crashed_before_timeout"] = time.monotonic() - t0 < SHORT_TIMEOUT_MS / 1000
    target.kill_node(node)  # NotSupportedByTarget where the target cannot
    target.restart_node(node)
    obs["commit"], obs["retriable_seen"] = _commit_after_restart(target, long_tid, long_pid, long_epoch)
    obs["stable"] = {p: stable_after_restart(target, topic, p) for p in PARTS}
    with wire.cluster_client(target) as cc:
        obs["committed_after"] = {p: committed_values(cc, topic, p) for p in PARTS}
    return obs


@pytest.mark.deadline(900)
@pytest.mark.requirement("KIP-98.TXN.001", "KIP-98.COORD.004", "KIP-98.TIMEOUT.001", "KIP-98.LSO.003")
def test_open_multi_partition_transactions_resolve_atomically_after_coordinator_crash(target, capabilities, unique, request):
    require_transactions(capabilities)
    obs = open_transactions_crash_scenario(target, unique)
    request.node.user_properties.append(("crashed_before_timeout", obs["crashed_before_timeout"]))
    before = {p: [f"before-p{p}"] for p in PARTS}
    assert obs["committed_while_open"] == before, f"KIP-98.LSO.003: open transactions visible before the crash: {obs}"
    assert obs["commit"] == NONE, f"EndTxn(commit) after the restart: {obs['commit']} (retriable seen {obs['retriable_seen']})"
    # KIP-98.COORD.004 / KIP-98.TIMEOUT.001: the rebuilt coordinator finished both.
    unstable = {p: hw_lso for p, hw_lso in obs["stable"].items() if hw_lso[0] != hw_lso[1]}
    assert not unstable, f"LSO stuck below the high watermark after the restart (hw, lso): {unstable}"
    for p in PARTS:
        # KIP-98.TXN.001: the short transaction aborted (timed out), the long one committed:
        # nothing of the short one, all of the long one, on both partitions.
        assert obs["committed_after"][p] == before[p] + obs["long"][p], (p, obs["committed_after"][p])


# ---------------------------------------------------------------- read_committed from inside


def aborted_inside_scenario(target, unique) -> dict[str, Any]:
    """The visibility suite's aborted-inside log, read again after its leader's crash."""
    with wire.cluster_client(target) as cc:
        topic, pid = write_aborted_inside(target, cc, unique)
        leader = int(next(x.leader_id for x in wire.topic_ids(cc, topic).partitions if x.partition_index == 0))
    target.kill_node(leader)  # NotSupportedByTarget where the target cannot
    target.restart_node(leader)
    stable_after_restart(target, topic, 0, at_least=ABORTED_INSIDE_END)
    with wire.cluster_client(target) as cc:
        return read_from_inside(cc, topic, pid)


@pytest.mark.deadline(900)
@pytest.mark.requirement("KIP-98.FETCH.002", "KIP-98.TXN.003")
def test_read_committed_from_inside_an_aborted_transaction_after_leader_crash(target, capabilities, unique):
    """KIP-98.FETCH.002 / KIP-98.TXN.003 after the leader's crash: fetches starting inside the
    aborted transaction list it and return none of its records."""
    require_transactions(capabilities)
    assert_aborted_inside_dropped(aborted_inside_scenario(target, unique))


# ---------------------------------------------------------------- decided, then coordinator crash


def _tid_coordinated_elsewhere(cc, unique, avoid: int) -> tuple[str, int]:
    """A fresh transactional id whose coordinator is not node `avoid`, and its coordinator."""
    for _ in range(64):
        tid = unique.transactional_id()
        node, _ = _coordinator_node(cc, tid, 30)
        if node != avoid:
            return tid, node
    raise AssertionError(f"64 transactional ids all coordinated by node {avoid}")


def _decide(target, tid: str, pid: int, epoch: int, committed: bool, wait_s: float = RESOLVE_WAIT_S) -> list:
    """EndTxn while the only replica of the transaction's partition is down: the decision
    (PrepareCommit/PrepareAbort) reaches the transaction log, the marker cannot be written.
    Settling answers are retried (Kafka's log append waits until the dead node leaves the
    __transaction_state ISR); CONCURRENT_TRANSACTIONS after one of them means an earlier try
    was decided. Returns every answer."""
    seen: list = []
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with wire.cluster_client(target) as cc:
                _, node = _coordinator_node(cc, tid, 30)
                code: int | str = int(end_txn(node, tid, pid, epoch, committed)[1].error_code)
        except (OSError, ConnectionError, EOFError) as exc:
            code = f"io:{type(exc).__name__}"
        seen.append(code)
        if code == NONE or (code == ErrorCode.concurrent_transactions and len(seen) > 1):
            return seen
        if (isinstance(code, int) and code not in TXN_SETTLING) or time.monotonic() > deadline:
            raise AssertionError(f"EndTxn(committed={committed}) with the partition's leader down answered {seen}")
        time.sleep(0.2)


def _described(target, tid: str, wait_s: float = RESOLVE_WAIT_S) -> dict[str, Any]:
    """DescribeTransactions(tid) at its (possibly new, possibly loading) coordinator."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with wire.cluster_client(target) as cc:
                _, node = _coordinator_node(cc, tid, 30)
                got = describe(node, tid)
            if got["error"] not in TXN_SETTLING:
                return got
        except (OSError, ConnectionError, EOFError, LookupError):
            got = {}
        if time.monotonic() > deadline:
            raise AssertionError(f"DescribeTransactions({tid}) kept settling: {got}")
        time.sleep(0.5)


def decided_then_coordinator_crash_scenario(target, unique, committed: bool) -> dict[str, Any]:
    """t-0 has one replica, on node L; T's coordinator is another node C. With L down, EndTxn
    decides T; C crashes before any marker could be written; L comes back. The coordinator
    that takes T over must finish the decision from the transaction log."""
    require_nodes(target, 3)  # L and C down together, a third node takes T over
    require_api(target.capabilities(), DESCRIBE_TRANSACTIONS, what="DescribeTransactions")
    topic, vals = unique.topic(), values("decided-", 3)
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic, replication=1)
        wire.produce(cc.leader_for(topic, 0), topic, 0, plain_batch(["before"]))
        leader = int(next(x.leader_id for x in wire.topic_ids(cc, topic).partitions if x.partition_index == 0))
        tid, coord_node = _tid_coordinated_elsewhere(cc, unique, leader)
        coord, init, _ = init_ok(cc, tid, timeout_ms=LONG_TIMEOUT_MS)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, idem_batch(vals, pid, epoch, 0, True))
    target.kill_node(leader)  # NotSupportedByTarget where the target cannot
    obs["end_txn"] = _decide(target, tid, pid, epoch, committed)
    obs["state_decided"] = _described(target, tid)["state"]
    target.kill_node(coord_node)
    target.restart_node(leader)
    obs["stable"] = stable_after_restart(target, topic, 0, at_least=len(vals) + 2)
    with wire.cluster_client(target) as cc:
        obs["committed"] = committed_values(cc, topic, 0)
    target.restart_node(coord_node)
    obs["state_after"] = _described(target, tid)["state"]
    with wire.cluster_client(target) as cc:
        _, again, _ = init_ok(cc, tid)
    obs["init_after"] = (int(again.error_code), (int(again.producer_id), int(again.producer_epoch)) != (pid, epoch))
    obs["values"] = vals
    return obs


@pytest.mark.deadline(900)
@pytest.mark.parametrize("outcome", ["commit", "abort"])
@pytest.mark.requirement("KIP-98.COORD.004", "KIP-98.ENDTXN.002")
def test_decided_transaction_completes_after_coordinator_crash(target, capabilities, unique, outcome):
    """KIP-98.COORD.004: a transaction decided (PrepareCommit / PrepareAbort written, EndTxn
    answered) whose markers could not be written when its coordinator crashed is finished by
    the next coordinator from the transaction log: COMMIT makes all its records visible, ABORT
    none, the LSO reaches the high watermark, and the id works again. KIP-98.ENDTXN.002: EndTxn
    answered while the marker was still pending (the transaction showed Prepare*)."""
    require_transactions(capabilities)
    committed = outcome == "commit"
    obs = decided_then_coordinator_crash_scenario(target, unique, committed)
    prepared, complete = ("PrepareCommit", "CompleteCommit") if committed else ("PrepareAbort", "CompleteAbort")
    hw, lso = obs["stable"]
    assert hw == lso, f"KIP-98.COORD.004: the decided transaction still holds the LSO (hw {hw}, lso {lso}): {obs}"
    want = ["before", *obs["values"]] if committed else ["before"]
    assert obs["committed"] == want, f"KIP-98.COORD.004: {outcome} decided before the crash, read_committed: {obs}"
    assert obs["state_after"] == complete, f"KIP-98.COORD.004: {obs}"
    # KIP-98.ENDTXN.002, and the window was real: EndTxn answered on the decision, its marker pending.
    assert obs["state_decided"] == prepared, f"KIP-98.ENDTXN.002: with the partition's only replica down: {obs}"
    assert obs["init_after"] == (NONE, True), f"InitProducerId after the recovery: {obs}"
