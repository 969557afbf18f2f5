"""KAFKA-19632: after a share-partition is reloaded from its persisted state, a fetch
with a small record limit acquires past a gap and hands out records that were
already acknowledged before the reload.

Affected: Apache Kafka 4.1.0-4.1.2 (SharePartition.acquireNewBatchRecords); fixed in
4.2.0 (apache/kafka#20395: inside the persister's read-gap window the acquired range stops
at the gap's end). The setup, on the partition's leader:

1. two producer batches, offsets 0-9 and 10-19; member A acquires all 20;
2. A accepts 0-9 (the SPSO moves to 10) and then 15-18, and holds 10-14 and 19 (Acquired
   is never persisted, KIP-932);
3. the leader is killed (SIGKILL, A still connected) and restarted: the share-partition
   is rebuilt from ReadShareGroupState, SPSO 10 with 15-18 Acknowledged, so 10-14 is a
   gap to re-fetch;
4. member B fetches with MaxRecords 2. The log answers with the batch 10-19. A correct
   leader acquires from the gap only (10-14, later 19); 4.1.x caps the range at the
   end of the *producer batch* holding offset 11, i.e. 19, and acquires 10-19 again,
   so 15-18 are delivered a second time although they were acknowledged
   (KIP-932.ACK.004: an acknowledged record is never delivered again).

The persisted state after the restart is recorded and checked first: a run where it is
not SPSO 10 with a gap before an Acknowledged 15-18 could not set the bug up and is
reported as such, never as a pass.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clients.share import (
    ACCEPT, ACKNOWLEDGED, E, SharePartitionUnderTest, ShareSession, acquired, join_share_group, read_share_state,
)
from targets.factory import create_target

SCENARIO = "kafka-19632"
BATCH = 10  # records per producer batch: offsets 0-9 and 10-19
ACCEPTED_BEFORE = (range(0, 10), range(15, 19))  # acknowledged by member A before the reload
WANTED = set(range(10, 15)) | {19}  # what member B must get (once each)
MAX_RECORDS = 2  # member B's ShareFetch MaxRecords: below the 5-record gap 10-14
RELOAD_WAIT_S = 150.0  # a restarted Kafka's share coordinator was seen loading for over 60 s (test_durability)
LOCK_MS = "60000"  # Kafka's maximum: A's locks on 10-14 and 19 must not expire (and be persisted) before the kill


class ScenarioNotSetUp(RuntimeError):
    """The target did not reach the bug's starting condition: nothing was judged."""


@dataclass
class Outcome:
    target: str
    persisted_start: int | None = None
    persisted_batches: list[list[int]] = field(default_factory=list)
    """(first, last, delivery state, delivery count) the share coordinator held after the restart."""
    acquired_by_b: list[list[int]] = field(default_factory=list)
    """Member B's AcquiredRecords ranges (first, last, delivery count), in order."""
    redelivered: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    verdict: str = ""
    explanation: str = ""

    @property
    def wrong(self) -> bool:
        return self.verdict.startswith("wrong")

    @property
    def known(self) -> bool:
        return not self.verdict.startswith("unknown")

    def summary(self) -> str:
        return (f"target={self.target} persisted_spso={self.persisted_start} persisted={self.persisted_batches} "
                f"acquired_after_reload={self.acquired_by_b}")


def accepted_before() -> set[int]:
    return {o for r in ACCEPTED_BEFORE for o in r}


def run(target: Any, target_spec: str, tag: str | None = None) -> Outcome:
    """The scenario on a started target whose topic partition 0 lives on one node: that
    node is killed and restarted (on one node the share coordinator goes down with it)."""
    tag = tag or uuid.uuid4().hex[:8]
    out = Outcome(target_spec)
    with target.cluster_client() as cc:
        sp = SharePartitionUnderTest(target, cc, f"kafka-19632-{tag}", f"kafka-19632-{tag}")
        sp.open({"share.record.lock.duration.ms": LOCK_MS})
        hold_and_accept(sp)
        leader = leader_id(cc, sp.topic)
        # SIGKILL while A's connection is open: a live broker whose client disconnects closes
        # its share session and releases (and persists) 10-14 and 19; a killed one loses them.
        target.kill_node(leader)
    target.restart_node(leader)
    with target.cluster_client() as cc:
        start, batches = persisted_after_restart(cc, sp)
        out.persisted_start, out.persisted_batches = start, [list(b) for b in batches]
        check_set_up(start, batches)
        member, _ = join_share_group(cc, sp.group, [sp.topic], wait_s=RELOAD_WAIT_S)
        b = ShareSession(cc.leader_for(sp.topic, 0), sp.group, member)
        out.acquired_by_b = drain(b, (sp.tid, 0))
    return judge(out)


def hold_and_accept(sp: SharePartitionUnderTest) -> None:
    """Steps 1-2: member A acquires 0-19 and accepts 0-9, then 15-18 (two writes, so the
    second persists the SPSO the first moved to 10); 10-14 and 19 stay acquired."""
    a = sp.primed_member()
    sp.produce_batches(2, BATCH)
    got = a.fetch_until([sp.key()], 2 * BATCH)
    if set(got) != set(range(2 * BATCH)):
        raise ScenarioNotSetUp(f"member A acquired {sorted(got)}, not offsets 0-{2 * BATCH - 1}")
    for r in ACCEPTED_BEFORE:
        ack = a.ack({sp.key(): [(r.start, r.stop - 1, [ACCEPT])]})
        codes = [int(p.error_code) for t in ack.responses for p in t.partitions]
        if ack.error_code != E.none or codes != [E.none]:
            raise ScenarioNotSetUp(f"accepting {r.start}-{r.stop - 1} failed: {ack.error_code!r} {codes}")


def leader_id(cc: Any, topic: str) -> int:
    (t,) = [t for t in cc.refresh([topic]).topics if t.name == topic]
    return int(next(p.leader_id for p in t.partitions if p.partition_index == 0))


def persisted_after_restart(cc: Any, sp: SharePartitionUnderTest) -> tuple[int, list[tuple[int, int, int, int]]]:
    """ReadShareGroupState once the restarted share coordinator serves it: Kafka 4.1 first
    answers UNKNOWN_TOPIC_OR_PARTITION while its state topic partition is loading."""
    deadline = time.monotonic() + RELOAD_WAIT_S
    while True:
        try:
            return read_share_state(cc, sp.group, sp.tid, wait_s=5)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def check_set_up(start: int, batches: list[tuple[int, int, int, int]]) -> None:
    """Step 3's starting condition: SPSO 10, 15-18 Acknowledged, nothing persisted for 10-14."""
    state = {o: s for f, l, s, _ in batches for o in range(f, l + 1)}
    if start != BATCH or any(state.get(o) != ACKNOWLEDGED for o in range(15, 19)) or any(o in state for o in range(10, 15)):
        raise ScenarioNotSetUp(f"the persisted state is not SPSO {BATCH} with a gap before an Acknowledged "
                               f"15-18: start {start}, batches {batches}")


def drain(b: ShareSession, key: tuple[uuid.UUID, int]) -> list[list[int]]:
    """Step 4: member B fetches (MaxRecords 2) and accepts what it got on the next fetch,
    until it has 10-14 and 19, or got an already acknowledged offset, or the deadline.
    Partition errors (the reloaded share-partition still initialising) are retried."""
    ranges: list[list[int]] = []
    acks: list[tuple[int, int, list[int]]] = []
    deadline = time.monotonic() + RELOAD_WAIT_S
    while time.monotonic() < deadline:
        resp = b.fetch([key], acks={key: acks} if acks and b.epoch > 0 else None, max_wait_ms=500,
                       max_records=MAX_RECORDS)
        if resp.error_code != E.none:  # the session is gone: open a new one (unsent acks expire with the lock)
            b.epoch, acks = 0, []
            time.sleep(0.3)
            continue
        new = acquired(resp)
        ranges += [list(r) for r in new]
        acks = [(f, l, [ACCEPT]) for f, l, _ in new]
        got = {o for f, l, _ in ranges for o in range(f, l + 1)}
        if WANTED <= got or got & accepted_before():
            break
        if not new:
            time.sleep(0.2)
    return ranges


def judge(out: Outcome) -> Outcome:
    got = [o for f, l, _ in out.acquired_by_b for o in range(f, l + 1)]
    out.redelivered = sorted(set(got) & accepted_before())
    out.missing = sorted(WANTED - set(got))
    if out.redelivered:
        out.verdict = "wrong: redelivered acknowledged records"
        out.explanation = (f"offsets {out.redelivered} were accepted before the share-partition was reloaded and "
                           f"were acquired again after it (KIP-932.ACK.004)")
    elif out.missing:
        out.verdict = "unknown: not drained"
        out.explanation = f"member B never got {out.missing} before the deadline, so the reload was not exercised"
    else:
        out.verdict = "correct"
        out.explanation = "after the reload only the gap 10-14 and offset 19 were delivered, each once"
    return out


def run_spec(target_spec: str, out_dir: Path) -> Outcome:
    """Start the target, run the scenario, write ``scenario.json``."""
    target = create_target(target_spec)
    target.start()
    try:
        out = run(target, target_spec)
    finally:
        target.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.json").write_text(json.dumps({"scenario": SCENARIO, **asdict(out)}, indent=1))
    return out
