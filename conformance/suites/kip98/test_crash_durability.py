"""KIP-98 durability across a broker crash, with interesting state at the crash.

* Two transactions open at the crash of their (shared) coordinator, each spanning several
  batches on two partitions: one with a short timeout, which the rebuilt coordinator must
  abort (or the old one did before the crash), one with a long timeout, which the producer
  commits after the restart. Each is all-or-nothing on both partitions, never half
  visible (TXN.001), and the rebuilt coordinator finishes them from the transaction log
  (COORD.004, TIMEOUT.001).
* A read_committed fetch that starts inside an aborted multi-batch transaction, after the
  crash of the partition's leader: from a seek to its middle, and with a fetch size smaller
  than one batch. The answer must list the aborted transaction (FETCH.002) so the reader
  drops every aborted record, and keep the committed ones around it (TXN.003).

On the reference a node kill is a crash (the coordinator's cache is lost and replayed from
the transaction log); on kafka-native it is a SIGKILL of the broker. Targets that cannot
restart a node are not supported.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from clients import wire
from clients.errors import TXN_SETTLING
from clients.txn import add_partitions_ok, end_txn, end_txn_ok, init_ok, produce_txn_ok
from conformance.suites.kip98 import (
    READ_COMMITTED, create_ready_topic, idem_batch, plain_batch, require_transactions, values, wait_stable,
)
from conformance.suites.kip98.test_coordinator_failover import _coordinator_node
from conformance.suites.kip98.test_fencing import NONE, batch_summary, committed_values

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


def read_committed_from(cc, topic: str, partition: int, start: int, max_bytes: int) -> dict[str, Any]:
    """A read_committed reader seeked to `start` (the Java consumer's algorithm): data below
    the LSO minus the batches of the aborted transactions the answers list, whatever their
    first offset (a seek can land inside one)."""
    leader = cc.leader_for(topic, partition)
    kept: list[str] = []
    listed: set[tuple[int, int]] = set()  # not yet ended by their ABORT marker
    reported: set[tuple[int, int]] = set()  # every (first offset, producer id) an answer listed
    aborting: set[int] = set()
    offset, answers = start, 0
    for _ in range(200):
        p = wire.fetch(cc, leader, topic, partition, offset, isolation_level=READ_COMMITTED, max_bytes=max_bytes)
        assert int(p.error_code) == 0, f"Fetch {topic}-{partition}@{offset}: error {int(p.error_code)}"
        answers += 1
        answer = {(int(a.first_offset), int(a.producer_id)) for a in (p.aborted_transactions or ())}
        listed |= answer - reported
        reported |= answer
        batches = [b for b in batch_summary(p.records) if b["last_offset"] >= offset]
        if not batches:
            break
        for b in batches:
            aborting |= {pid for first, pid in listed if first <= b["last_offset"]}
            if b["control"]:
                if b.get("marker") == "ABORT":
                    aborting.discard(b["producer_id"])
                    listed = {(f, pid) for f, pid in listed if pid != b["producer_id"] or f > b["last_offset"]}
                continue
            if not (b["transactional"] and b["producer_id"] in aborting):
                kept += b["values"]
        offset = batches[-1]["last_offset"] + 1
    return {"values": kept, "listed": sorted(reported), "answers": answers}


def aborted_inside_scenario(target, unique) -> dict[str, Any]:
    topic, tid = unique.topic(), unique.transactional_id()
    obs: dict[str, Any] = {}
    with wire.cluster_client(target) as cc:
        create_ready_topic(target, cc, topic)
        wire.produce(cc.leader_for(topic, 0), topic, 0, plain_batch(["c0", "c1"]))  # offsets 0, 1
        coord, init, _ = init_ok(cc, tid)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        for b in range(4):  # offsets 2..9: four aborted batches of two records
            produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0,
                           idem_batch(values(f"aborted-b{b}-", 2), pid, epoch, 2 * b, True))
        end_txn_ok(coord, tid, pid, epoch, False)  # abort marker at 10
        wait_stable(cc.leader_for(topic, 0), topic, 0, at_least=11)
        wire.produce(cc.leader_for(topic, 0), topic, 0, plain_batch(["c2", "c3"]))  # 11, 12
        leader = int(next(x.leader_id for x in wire.topic_ids(cc, topic).partitions if x.partition_index == 0))
    target.kill_node(leader)  # NotSupportedByTarget where the target cannot
    target.restart_node(leader)
    stable_after_restart(target, topic, 0, at_least=13)
    with wire.cluster_client(target) as cc:
        for start in (0, 5):
            for max_bytes in (1 << 20, 1):  # 1 byte: one batch per answer (KIP-74)
                obs[(start, max_bytes)] = read_committed_from(cc, topic, 0, start, max_bytes)
    obs["pid"] = pid
    return obs


@pytest.mark.deadline(900)
@pytest.mark.requirement("KIP-98.FETCH.002", "KIP-98.TXN.003")
def test_read_committed_from_inside_an_aborted_transaction_after_leader_crash(target, capabilities, unique):
    require_transactions(capabilities)
    obs = aborted_inside_scenario(target, unique)
    want = {0: ["c0", "c1", "c2", "c3"], 5: ["c2", "c3"]}
    for (start, max_bytes), got in ((k, v) for k, v in obs.items() if isinstance(k, tuple)):
        assert got["values"] == want[start], f"KIP-98.TXN.003: seek to {start}, max_bytes {max_bytes}: {got}"
        # KIP-98.FETCH.002: the aborted transaction overlapping the answer is listed.
        assert any(pid == obs["pid"] and first <= max(start, 2) for first, pid in got["listed"]), \
            f"seek to {start}, max_bytes {max_bytes}: the aborted transaction (pid {obs['pid']}) is not listed: {got}"
