"""Hypothesis stateful test of KIP-1289 against an abstract model, on the target's wire.

One share-partition, two member slots, two TV2 transactional producers. Steps: produce
records; a slot fetches (ShareFetch); a slot acknowledges some offsets outside any
transaction (ShareAcknowledge); a producer stages ACCEPT/REJECT for offsets through a slot
(TxnShareAcknowledge); a producer commits or aborts (EndTxn v5, then waits for the
transaction to complete, i.e. its markers). The abstract model keeps per offset: available,
acquired by a slot, pending in a producer's transaction (with the staged type), acknowledged
or archived, and the delivery count. Checked at every step: a fetch acquires exactly the
available offsets with count + 1; a staging succeeds iff every offset is acquired by the
slot and every type is ACCEPT/REJECT, and changes nothing otherwise; a plain
acknowledgement of a pending or foreign offset is INVALID_RECORD_STATE; commit applies the
staged types, abort gives the offsets back to the slot that staged them. Locks are 30 s
(the default) and every example is far shorter, so time never decides an outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test
from kio.schema.errors import ErrorCode as E

from clients.share import ACCEPT, REJECT, ack_codes, delivery_counts
from conformance.suites.kip1289 import member_epoch, partition_codes, stage, wait_for

MAX_OFFSETS = 12


@dataclass
class Offset:
    state: str = "available"  # available | acquired | pending | acknowledged | archived
    slot: int | None = None
    txn: int | None = None
    type: int | None = None
    count: int = 0


class Model:
    def __init__(self) -> None:
        self.offsets: dict[int, Offset] = {}

    def available(self) -> dict[int, int]:
        return {o: s.count + 1 for o, s in self.offsets.items() if s.state == "available"}

    def can_stage(self, slot: int, offsets: list[int], types: list[int]) -> bool:
        return all(t in (ACCEPT, REJECT) for t in types) and all(
            self.offsets[o].state == "acquired" and self.offsets[o].slot == slot for o in offsets)

    def end(self, txn: int, committed: bool) -> None:
        for s in self.offsets.values():
            if s.state == "pending" and s.txn == txn:
                if committed:
                    s.state, s.slot = ("acknowledged" if s.type == ACCEPT else "archived"), None
                else:
                    s.state = "acquired"
                s.txn = s.type = None


def build(kip):
    class TxnShareAckMachine(RuleBasedStateMachine):
        @initialize()
        def setup(self) -> None:
            self.sp = kip.share_partition(1, {"share.auto.offset.reset": "earliest"})
            self.members = [self.sp.primed_member(), self.sp.primed_member()]  # sessions open
            self.epochs = [member_epoch(kip.cc, self.sp.group, m.member, self.sp.member_epochs[m.member])
                           for m in self.members]
            self.txns = [kip.txn(), kip.txn()]
            self.model = Model()

        def _refresh_epoch(self, slot: int) -> int:
            m = self.members[slot]
            self.epochs[slot] = member_epoch(kip.cc, self.sp.group, m.member, self.epochs[slot])
            return self.epochs[slot]

        @precondition(lambda self: len(self.model.offsets) < MAX_OFFSETS)
        @rule(n=st.integers(1, 4))
        def produce(self, n: int) -> None:
            base = self.sp.produce([b"r%d" % i for i in range(n)])
            for o in range(base, base + n):
                self.model.offsets[o] = Offset()

        @rule(slot=st.integers(0, 1))
        def fetch(self, slot: int) -> None:
            expected = self.model.available()
            got = self.members[slot].fetch_until([self.sp.key()], len(expected), wait_s=5) if expected else \
                delivery_counts(self.members[slot].fetch([self.sp.key()], max_wait_ms=100))
            assert got == expected, f"fetch by slot {slot}: got {got}, model {expected}"
            for o in got:
                s = self.model.offsets[o]
                s.state, s.slot, s.count = "acquired", slot, s.count + 1

        @precondition(lambda self: self.model.offsets)
        @rule(slot=st.integers(0, 1), txn=st.integers(0, 1), data=st.data())
        def stage(self, slot: int, txn: int, data) -> None:
            held = sorted(o for o, s in self.model.offsets.items() if s.state == "acquired" and s.slot == slot)
            pool = held if held and data.draw(st.integers(0, 3)) else sorted(self.model.offsets)  # mostly valid
            offsets = sorted(data.draw(st.sets(st.sampled_from(pool), min_size=1, max_size=4)))
            types = [data.draw(st.sampled_from([ACCEPT, ACCEPT, REJECT, REJECT, ACCEPT, 2])) for _ in offsets]
            self._stage(slot, txn, offsets, types)

        def _stage(self, slot: int, txn: int, offsets: list[int], types: list[int]) -> None:
            acks = {self.sp.key(): [(o, o, [t]) for o, t in zip(offsets, types)]}
            m = self.members[slot]
            resp = stage(m.node, self.txns[txn], self.sp.group, m.member, self._refresh_epoch(slot), acks)
            ok = self.model.can_stage(slot, offsets, types)
            assert resp.error_code == E.none, resp
            code = partition_codes(resp)[self.sp.key()]
            assert (code == E.none) == ok, f"staging {offsets} {types} by slot {slot}: {code}, model ok={ok}"
            if not ok:
                assert code in (E.invalid_record_state, E.invalid_request), resp
                return
            for o, t in zip(offsets, types):
                s = self.model.offsets[o]
                s.state, s.txn, s.type = "pending", txn, t

        @precondition(lambda self: self.model.offsets)
        @rule(slot=st.integers(0, 1), data=st.data())
        def plain_ack(self, slot: int, data) -> None:
            o = data.draw(st.sampled_from(sorted(self.model.offsets)))
            s = self.model.offsets[o]
            if s.state in ("acknowledged", "archived") and o < self.sp.state()[0]:
                return  # below the SPSO: Kafka accepts and ignores it (DIV-022)
            code = ack_codes(self.members[slot].ack({self.sp.key(): [(o, o, [ACCEPT])]}))[0]
            ok = s.state == "acquired" and s.slot == slot
            assert (code == E.none) == ok, f"ACCEPT {o} by slot {slot}: {code}, model {s}"
            if ok:
                s.state, s.slot = "acknowledged", None

        @precondition(lambda self: len(self.model.offsets) < MAX_OFFSETS)
        @rule(slot=st.integers(0, 1), txn=st.integers(0, 1), committed=st.booleans(), data=st.data())
        def read_process_write(self, slot: int, txn: int, committed: bool, data) -> None:
            """The KIP's loop in one step: produce, fetch, stage what the slot holds, end."""
            self.produce(2)
            self.fetch(slot)
            held = sorted(o for o, s in self.model.offsets.items() if s.state == "acquired" and s.slot == slot)
            if held:
                types = [data.draw(st.sampled_from([ACCEPT, REJECT])) for _ in held]
                self._stage(slot, txn, held, types)
            self.end(txn, committed)

        @rule(txn=st.integers(0, 1), committed=st.booleans())
        def end(self, txn: int, committed: bool) -> None:
            t = self.txns[txn]
            resp = t.end(committed)
            if resp.error_code == E.invalid_txn_state:  # nothing staged: an empty TV2 commit
                assert committed and not any(s.txn == txn for s in self.model.offsets.values())
                return
            assert resp.error_code == E.none, resp
            target_state = "CompleteCommit" if committed else "CompleteAbort"
            wait_for(lambda: t.describe().transaction_state == target_state, "the transaction to complete")
            self.model.end(txn, committed)

    return TxnShareAckMachine


@pytest.mark.slow(2)
@pytest.mark.requirement("KIP-1289.STATE.001", "KIP-1289.STATE.002", "KIP-1289.STATE.003", "KIP-1289.STATE.004",
                         "KIP-1289.MARKER.001", "KIP-1289.API.005", "KIP-1289.FENCE.004")
def test_random_operation_sequences_follow_the_model(kip):
    machine = build(kip)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=6, stateful_step_count=12, deadline=None, derandomize=True, database=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate), suppress_health_check=list(HealthCheck),
    ))
