"""Model-based differential testing of transactions (KIP-98 / KIP-890) with Hypothesis.

A `RuleBasedStateMachine` drives random sequences of transactional operations against
two clusters at once, in lockstep:

* the *target* side: the cluster under test (kafka-native, or the reference itself);
* the *reference* side: a private, fresh `ThreadedReferenceCluster` per example (one
  node, `ManualClock`), so nothing leaks between examples.

On each side the same 2-3 reference `TransactionalProducer` slots share 1-2
transactional ids (so re-initialising one slot fences the others), and every step is
one operation on one slot: ``init`` (a new producer instance in the slot, which fences
older instances of its transactional id), ``begin``, ``send`` (records to one of 1-2
partitions, flushed at once so the data is in the log while the transaction is open),
``commit``, ``abort``; and, where both sides allow it, ``advance_past_timeout`` (move
the ManualClock past the transaction timeout and the abort scan) and
``restart_coordinator`` (rebuild the reference transaction coordinator from its
transaction log, `TransactionCoordinator.rebuild`).

After every step each side waits until its partitions settle (markers are written
asynchronously after EndTxn) and records an observation: the outcome class of the
operation (``ok`` / ``fenced`` / ``fatal`` / ``abortable`` / ``illegal_state`` /
``timeout`` ... plus the Kafka error name), each producer slot's client state, producer
id and epoch, and per partition the high watermark, the last stable offset and the
(offset, value) lists read at read_uncommitted and read_committed. Observations are
normalized with `clients.normalize.Normalizer` (one per side for the whole run, so
producer ids and epochs become ``<producer_id#n>`` / ``<producer_epoch#n>`` numbered in
order of appearance) and compared; any difference fails the example and Hypothesis
shrinks it to a minimal step sequence.

Each side is also checked against an explicit model (the oracle, from the side's own
outcomes): read_uncommitted shows exactly the records whose produce succeeded;
read_committed exactly the records of transactions whose commit returned ok; a fenced
instance never gets a produce or a commit through; the high watermark counts records
plus one marker per finished transaction and partition; the LSO is the first offset of
the earliest open transaction (else the high watermark). Outcomes the model cannot
decide (a timed-out call, an unexpected fatal error) make the affected partitions
"uncertain" and only the differential comparison applies to them.

Time and restarts: the transaction timeout cannot be reproduced in lockstep on a real
broker (it runs on wall time; waiting for it costs ~`timeout + 1 s` per step and risks
spontaneous aborts in other steps), and restarting a kafka-native node takes seconds.
Both rules are therefore only enabled when both sides are reference clusters with a
ManualClock (`time_rules=True`): the reference-vs-reference self check, where the
target side is a private reference cluster with the target's node count. The model's
post-timeout rules (a timed-out TV2 producer gets INVALID_PRODUCER_EPOCH on its next
send, INVALID_TXN_STATE on commit, and recovers with an ok abort) were checked once
against kafka-native 4.4.0 with a 1 s transaction timeout and a real wait.

Outside pytest::

    python -m conformance.txn_model_machine --bootstrap HOST:PORT   # target vs reference
    python -m conformance.txn_model_machine --self-check            # reference vs reference, with time
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from clients.normalize import Normalizer, compare
from clients.wire import create_topic
from reference_impl.client.consumer import Consumer
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.client.txn_state import (
    AbortableTxnError,
    FatalTxnError,
    IllegalTxnStateError,
    ProducerFencedError,
    TxnError,
    TxnTimeoutError,
    UnsupportedTxnVersionError,
)
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.clock import ManualClock
from reference_impl.model.transaction_coordinator import TransactionCoordinator
from reference_impl.server.broker_server import ThreadedReferenceCluster

__all__ = [
    "ClusterSide",
    "PrivateReference",
    "ExistingCluster",
    "MachineConfig",
    "build_machine",
    "default_settings",
    "run_machine",
    "outcome_of",
]

TRANSACTION_TIMEOUT_MS = 60_000
# Reference default transaction.abort.timed.out.transaction.cleanup.interval.ms (Kafka's too).
ABORT_SCAN_INTERVAL_MS = 10_000
SETTLE_TIMEOUT_S = 5.0
SETTLE_UNCERTAIN_S = 0.3
EPOCH_CATEGORY = {"producer_epoch": {"producer_epoch"}}
FENCING_ERRORS = frozenset({"INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"})
POLL_S = 0.01
# Polling while uncertain partitions must hold still: offsets only grow, so a change inside
# the window is seen at any later poll; a coarser step costs the brokers far fewer ListOffsets.
STABLE_POLL_S = 0.05


# -- backends ------------------------------------------------------------------------------


class PrivateReference:
    """A fresh reference cluster owned by one example (ManualClock: time moves on demand)."""

    kind = "reference"

    def __init__(self, brokers: int = 1, transaction_version: int = 2) -> None:
        # Start at wall time: the producer stamps records with wall-clock CreateTime, and a
        # broker clock years behind refuses them (INVALID_TIMESTAMP, timestamp.after.max.ms).
        self.clock = ManualClock(start_ms=int(time.time() * 1000))
        config = BrokerConfig(finalized_features={"transaction.version": transaction_version})
        self.cluster = ThreadedReferenceCluster(brokers=brokers, clock=self.clock, config=config).start()

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    can_control_time = True

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def restart_coordinator(self) -> None:
        """Coordinator fail-over: a new TransactionCoordinator loaded from the old one's
        transaction log (coordinator epoch + 1), swapped in on the broker's loop thread."""
        async def swap() -> None:
            state = self.cluster.cluster.state
            state.transactions = TransactionCoordinator.rebuild(state.transactions)

        self.cluster.call(swap())

    def close(self) -> None:
        self.cluster.stop()


class ExistingCluster:
    """A cluster the machine does not own (the pytest `target`): no time control."""

    kind = "target"
    can_control_time = False

    def __init__(self, bootstrap_servers: str, provision_topic: Callable[[str, int], None] | None = None,
                 security: Any = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # the raw client's ClientSecurity (TLS/SASL) for this cluster
        # for targets without CreateTopics: the provider's own way (Target.provision_topic)
        self.provision_topic = provision_topic

    def advance(self, ms: int) -> None:  # pragma: no cover - guarded by preconditions
        raise RuntimeError("this cluster's clock cannot be moved")

    def restart_coordinator(self) -> None:  # pragma: no cover - guarded by preconditions
        raise RuntimeError("this cluster's coordinator cannot be restarted")

    def close(self) -> None:
        pass


# -- outcomes ------------------------------------------------------------------------------


def outcome_of(exc: BaseException | None) -> dict[str, Any]:
    """The outcome class of one client call: ok, fenced, fatal, abortable, ..."""
    if exc is None:
        return {"class": "ok", "error": None}
    if isinstance(exc, ProducerFencedError):
        cls = "fenced"
    elif isinstance(exc, UnsupportedTxnVersionError):
        cls = "unsupported"
    elif isinstance(exc, FatalTxnError):
        cls = "fatal"
    elif isinstance(exc, AbortableTxnError):
        cls = "abortable"
    elif isinstance(exc, TxnTimeoutError):
        cls = "timeout"
    elif isinstance(exc, IllegalTxnStateError):
        cls = "illegal_state"
    elif isinstance(exc, TxnError):
        cls = "error"
    else:
        cls = f"exception:{type(exc).__name__}"
    return {"class": cls, "error": getattr(exc, "error_name", None)}


# -- the model of one side ---------------------------------------------------------------------


@dataclass
class ModelTxn:
    """One transaction as begun by one producer instance."""

    number: int
    instance: "Instance"
    # open | committed | aborted | unknown (may still be open) | unknown_closed (decided, outcome unknown)
    status: str = "open"
    records: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, value)
    maybe_written: set[int] = field(default_factory=set)  # partitions with a produce of unknown outcome
    failed_produce: set[int] = field(default_factory=set)  # partitions where a produce failed

    def partitions(self) -> set[int]:
        return {p for p, _, _ in self.records}

    def first_offset(self, partition: int) -> int | None:
        offs = [o for p, o, _ in self.records if p == partition]
        return min(offs) if offs else None


@dataclass
class Instance:
    slot: int
    tid_index: int
    generation: int
    producer: TransactionalProducer
    initialized: bool = False
    fenced: bool = False  # another instance of its transactional id initialised after it
    timed_out: bool = False  # its transaction was aborted by the coordinator's timeout
    txn: ModelTxn | None = None
    produced_list: Any = None
    produced_seen: int = 0


class OracleViolation(AssertionError):
    pass


class ClusterSide:
    """One cluster, its producers and consumers, and the model of what it must show."""

    def __init__(self, name: str, backend: Any, base: str, partitions: int, tids: int, slots: list[int]) -> None:
        self.name = name
        self.backend = backend
        self.topic = f"{base}-t"
        self.tids = [f"{base}-tx{i}" for i in range(tids)]
        self.partitions = list(range(partitions))
        self.slot_tid = slots
        self.instances: dict[int, Instance | None] = {s: None for s in range(len(slots))}
        self.all_instances: list[Instance] = []
        self.txns: list[ModelTxn] = []
        self._txn_numbers = itertools.count(1)
        self._generations = itertools.count(1)
        self.normalizer = Normalizer(extra_categories=EPOCH_CATEGORY)
        self._create_topic()
        self.rc = Consumer(self.bootstrap, "read_committed", max_wait_ms=100, security=self.security)
        self.ru = Consumer(self.bootstrap, "read_uncommitted", max_wait_ms=100, security=self.security)
        tps = [(self.topic, p) for p in self.partitions]
        self.rc.assign(tps)
        self.ru.assign(tps)

    @property
    def bootstrap(self) -> str:
        return self.backend.bootstrap_servers

    @property
    def security(self) -> Any:
        return getattr(self.backend, "security", None)

    def _create_topic(self) -> None:
        with ClusterClient(self.bootstrap, security=self.security) as cc:
            provision = getattr(self.backend, "provision_topic", None)
            if provision is not None:
                provision(self.topic, len(self.partitions))
            else:
                code = create_topic(cc, self.topic, partitions=len(self.partitions))
                if code not in (0, 36):
                    raise RuntimeError(f"{self.name}: CreateTopics {self.topic} failed with error {code}")
            deadline = time.monotonic() + 30
            while True:  # wait for leaders
                md = cc.refresh([self.topic])
                t = [t for t in md.topics if t.name == self.topic]
                if t and int(t[0].error_code) == 0 and len(t[0].partitions) == len(self.partitions) and all(
                    int(p.leader_id) >= 0 for p in t[0].partitions
                ):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: {self.topic} has no leaders")
                time.sleep(0.05)

    def close(self) -> None:
        for inst in self.all_instances:
            try:
                inst.producer.close()
            except Exception:
                pass
        for c in (self.rc, self.ru):
            try:
                c.close()
            except Exception:
                pass

    # -- operations -------------------------------------------------------------------------

    def _new_producer(self, tid: str) -> TransactionalProducer:
        return TransactionalProducer(
            self.bootstrap,
            tid,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            max_block_ms=15_000,
            delivery_timeout_ms=15_000,
            request_timeout_ms=10_000,
            retry_backoff_ms=20,
            security=self.security,
            retry_backoff_max_ms=200,
        )

    def op_init(self, slot: int) -> dict[str, Any]:
        """A new producer instance in the slot (the old one is closed), init_transactions()."""
        old = self.instances[slot]
        if old is not None:
            old.producer.close()
        tid_index = self.slot_tid[slot]
        inst = Instance(slot, tid_index, next(self._generations), self._new_producer(self.tids[tid_index]))
        self.instances[slot] = inst
        self.all_instances.append(inst)
        exc = self._call(inst.producer.init_transactions)
        if exc is None:
            inst.initialized = True
            # Every earlier instance of the transactional id is fenced; its open transaction
            # was aborted before InitProducerId answered (KIP-98 TXN.005 / FENCE.001).
            for other in self.all_instances:
                if other is inst or other.tid_index != tid_index:
                    continue
                other.fenced = True
                self._close_txn_on_fence(other.txn)
        else:
            # Unknown: the init may have fenced (the coordinator bumped the epoch) or not.
            for other in self.all_instances:
                if other is not inst and other.tid_index == tid_index and other.txn is not None:
                    if other.txn.status == "open":
                        other.txn.status = "unknown"
        return outcome_of(exc)

    @staticmethod
    def _close_txn_on_fence(txn: ModelTxn | None) -> None:
        if txn is None:
            return
        if txn.status == "open":
            txn.status = "aborted"
        elif txn.status == "unknown":
            txn.status = "unknown_closed"

    def op_begin(self, slot: int) -> dict[str, Any]:
        inst = self.instances[slot]
        assert inst is not None
        exc = self._call(inst.producer.begin_transaction)
        if exc is None:
            inst.txn = ModelTxn(next(self._txn_numbers), inst)
            self.txns.append(inst.txn)
        return outcome_of(exc)

    def op_send(self, slot: int, partition: int, values: list[str]) -> dict[str, Any]:
        """send() each value to the partition, then flush(): the batch is produced now, so
        the data sits in the log while the transaction is open."""
        inst = self.instances[slot]
        assert inst is not None
        before = self._pending_values(inst)
        accepted: list[str] = []
        exc: BaseException | None = None
        for v in values:
            exc = self._call(lambda v=v: inst.producer.send(self.topic, partition, v))
            if exc is not None:
                break
            accepted.append(v)
        if exc is None:
            exc = self._call(inst.producer.flush)
        sent = {p: list(vs) for p, vs in before.items()}
        if accepted:
            sent.setdefault(partition, []).extend(accepted)
        self._account_produced(inst, sent, self._pending_values(inst), exc)
        return outcome_of(exc)

    def op_commit(self, slot: int) -> dict[str, Any]:
        return self._end(slot, commit=True)

    def op_abort(self, slot: int) -> dict[str, Any]:
        return self._end(slot, commit=False)

    def _end(self, slot: int, commit: bool) -> dict[str, Any]:
        inst = self.instances[slot]
        assert inst is not None
        before = self._pending_values(inst)
        exc = self._call(inst.producer.commit_transaction if commit else inst.producer.abort_transaction)
        self._account_produced(inst, before, self._pending_values(inst), exc)
        txn = inst.txn
        out = outcome_of(exc)
        if txn is not None:
            if exc is None:
                if commit and txn.status == "aborted" and txn.records:
                    raise OracleViolation(
                        f"{self.name}: commit of slot {slot} returned ok, but its transaction "
                        f"{txn.number} was aborted (fenced or timed out) and holds data {txn.records}"
                    )
                if txn.status in ("open", "unknown"):
                    txn.status = "committed" if commit else "aborted"
                inst.txn = None
                if inst.timed_out:
                    # TV2 (KIP-890): after a timeout abort the producer's EndTxn with the
                    # previous epoch is answered as a retry with the bumped epoch; it recovers.
                    inst.timed_out = inst.fenced = False
            elif out["class"] in ("timeout",) or out["class"].startswith("exception"):
                if txn.status == "open":
                    txn.status = "unknown"
            elif out["class"] in ("fenced", "fatal", "unsupported"):
                if txn.status == "open":
                    # refused for good: the transaction stays open on the coordinator until
                    # a new instance fences it (or it times out) -- but a fatal error while
                    # completing may also have happened after the decision.
                    txn.status = "unknown"
                inst.txn = txn
            # abortable / illegal_state: the transaction stays as it was
        return out

    def op_advance_past_timeout(self) -> dict[str, Any]:
        self.backend.advance(TRANSACTION_TIMEOUT_MS + ABORT_SCAN_INTERVAL_MS + 1)
        for txn in self.txns:
            if txn.status == "open" and txn.records:
                txn.status = "aborted"
                txn.instance.fenced = True
                txn.instance.timed_out = True
            elif txn.status == "unknown":
                txn.status = "unknown_closed"
        return {"class": "ok", "error": None}

    def op_restart_coordinator(self) -> dict[str, Any]:
        self.backend.restart_coordinator()
        return {"class": "ok", "error": None}

    # -- produced-record accounting --------------------------------------------------------------

    def _call(self, fn: Callable[[], None]) -> BaseException | None:
        try:
            fn()
        except Exception as exc:  # every exception is an observed outcome
            return exc
        return None

    def _pending_values(self, inst: Instance) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for (topic, p), pending in inst.producer._pending.items():
            if topic == self.topic and pending.records:
                out[p] = [r.value.decode() for r in pending.records]
        return out

    def _new_batches(self, inst: Instance) -> list[Any]:
        produced = inst.producer.produced
        if produced is not inst.produced_list:
            inst.produced_list, inst.produced_seen = produced, 0
        new = produced[inst.produced_seen :]
        inst.produced_seen = len(produced)
        return new

    def _account_produced(
        self, inst: Instance, before: dict[int, list[str]], after: dict[int, list[str]], exc: BaseException | None
    ) -> None:
        """Attribute the batches acknowledged during one call to the instance's transaction:
        the values that left the producer's buffer, with offsets from the acknowledgements."""
        batches = self._new_batches(inst)
        queue = {p: list(vs) for p, vs in before.items()}
        for b in batches:
            if b.topic != self.topic:
                continue
            vals = queue.get(b.partition, [])
            taken, queue[b.partition] = vals[: b.record_count], vals[b.record_count :]
            txn = inst.txn
            if txn is None:
                raise OracleViolation(f"{self.name}: slot {inst.slot} produced {taken} outside a transaction")
            if txn.status == "aborted" or inst.fenced and not inst.timed_out:
                raise OracleViolation(
                    f"{self.name}: slot {inst.slot} (generation {inst.generation}) is fenced but its produce of "
                    f"{taken} to partition {b.partition} succeeded (offset {b.base_offset})"
                )
            for i, v in enumerate(taken):
                txn.records.append((b.partition, b.base_offset + i, v))
        if exc is not None and inst.txn is not None:
            # values that left the buffer without an acknowledgement
            for p, vals in queue.items():
                remaining = after.get(p, [])
                lost = vals[: max(0, len(vals) - len(remaining))]
                if not lost:
                    continue
                outcome = outcome_of(exc)
                if outcome["class"] == "timeout" or outcome["class"].startswith("exception"):
                    inst.txn.maybe_written.add(p)
                elif outcome["error"] not in FENCING_ERRORS:
                    # the partition may have joined the transaction before the append
                    # failed: it may get a marker without data
                    inst.txn.failed_produce.add(p)
                # a fencing error is raised by the coordinator's check (AddPartitionsToTxn,
                # or the leader's KIP-890 verification) before the partition is added

    # -- expectations ----------------------------------------------------------------------------

    def expected(self) -> dict[int, dict[str, Any]]:
        """Per partition: hw, lso, uncommitted, committed -- each None when uncertain."""
        out = {}
        for p in self.partitions:
            txns = [t for t in self.txns if p in t.partitions() or p in t.maybe_written or p in t.failed_produce]
            records = sorted((o, v, t) for t in self.txns for (pp, o, v) in t.records if pp == p)
            maybe_written = any(p in t.maybe_written for t in txns)
            unknown = [t for t in txns if t.status in ("unknown", "unknown_closed")]
            maybe_open = any(t.status == "unknown" for t in txns)
            marker_uncertain = any(p in t.failed_produce or p in t.maybe_written for t in txns if t.status != "open")
            markers = sum(1 for t in txns if p in t.partitions() and t.status in ("committed", "aborted", "unknown_closed"))
            hw = None if (maybe_written or maybe_open or marker_uncertain) else len(records) + markers
            opens = [t.first_offset(p) for t in txns if t.status == "open" and t.first_offset(p) is not None]
            lso: int | None
            if maybe_open or maybe_written:
                lso = None
            elif opens:
                lso = min(opens)
            else:
                lso = hw
            # read_committed stops at the LSO: committed records behind another producer's
            # open transaction are not visible yet (KIP-98 LSO.002).
            committed = None
            if lso is not None and not maybe_written and not any(p in t.partitions() for t in unknown):
                committed = [[o, v] for o, v, t in records if t.status == "committed" and o < lso]
            out[p] = {
                "hw": hw,
                "lso": lso,
                "uncommitted": None if maybe_written else [[o, v] for o, v, _ in records],
                "committed": committed,
            }
        return out

    # -- observing -------------------------------------------------------------------------------

    def offsets(self) -> dict[int, tuple[int, int]]:
        return {p: (self.ru.end_offset((self.topic, p)), self.rc.end_offset((self.topic, p))) for p in self.partitions}

    def settle(self) -> dict[int, tuple[int, int]]:
        """Wait until every certain partition shows the expected hw/lso (markers are written
        after EndTxn answers); partitions the model cannot predict must stay unchanged for
        SETTLE_UNCERTAIN_S. Returns the last (hw, lso) snapshot, the one judged settled."""
        exp = self.expected()
        uncertain = [p for p in self.partitions if exp[p]["hw"] is None or exp[p]["lso"] is None]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        last: dict[int, tuple[int, int]] | None = None
        stable_since = time.monotonic()
        while True:
            got = self.offsets()
            certain_ok = all(
                (exp[p]["hw"] is None or got[p][0] == exp[p]["hw"]) and (exp[p]["lso"] is None or got[p][1] == exp[p]["lso"])
                for p in self.partitions
            )
            now = time.monotonic()
            if got != last:
                last, stable_since = got, now
            if certain_ok and (not uncertain or now - stable_since >= SETTLE_UNCERTAIN_S):
                return got
            if now > deadline:
                return got
            time.sleep(STABLE_POLL_S if certain_ok else POLL_S)

    def _read(self, consumer: Consumer) -> dict[int, list[list[Any]]]:
        tps = [(self.topic, p) for p in self.partitions]
        for tp in tps:
            consumer.seek(tp, 0)
        recs = consumer.consume_to_end(tps, timeout_s=15)
        out: dict[int, list[list[Any]]] = {p: [] for p in self.partitions}
        for r in recs:
            out[r.partition].append([r.offset, None if r.value is None else r.value.decode()])
        return out

    def observe(self, op: str, args: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
        offs = self.settle()
        ru, rc = self._read(self.ru), self._read(self.rc)
        producers = {}
        for slot, inst in self.instances.items():
            if inst is None:
                producers[str(slot)] = None
                continue
            producers[str(slot)] = {
                "generation": inst.generation,
                "state": str(inst.producer.state),
                "producer_id": inst.producer.producer_id,
                "producer_epoch": inst.producer.producer_epoch,
            }
        return {
            "op": op,
            "args": args,
            "outcome": outcome,
            "producers": producers,
            "partitions": {
                str(p): {"hw": offs[p][0], "lso": offs[p][1], "read_uncommitted": ru[p], "read_committed": rc[p]}
                for p in self.partitions
            },
        }

    def check_oracle(self, obs: dict[str, Any]) -> None:
        """The model's verdict on this side's own observation (KIP-98 TXN/FENCE/LSO/FETCH)."""
        exp = self.expected()
        problems = []
        for p in self.partitions:
            got, e = obs["partitions"][str(p)], exp[p]
            for key, gkey in (("hw", "hw"), ("lso", "lso"), ("uncommitted", "read_uncommitted"), ("committed", "read_committed")):
                if e[key] is not None and got[gkey] != e[key]:
                    problems.append(f"partition {p} {gkey}: observed {got[gkey]}, model expects {e[key]}")
            if e["committed"] is None:
                # uncertain: still only records that were written, never ones of aborted transactions
                aborted = {v for t in self.txns if t.status == "aborted" for (pp, _, v) in t.records if pp == p}
                bad = [r for r in got["read_committed"] if r[1] in aborted]
                if bad:
                    problems.append(f"partition {p}: read_committed returned records of aborted transactions {bad}")
        if problems:
            raise OracleViolation(f"{self.name} after {obs['op']} {obs['args']}: " + "; ".join(problems))


# -- the state machine ----------------------------------------------------------------------


@dataclass
class MachineConfig:
    """How the machine builds its two sides for each example.

    make_target(): the target backend (ExistingCluster or PrivateReference);
    make_reference(): the private reference backend (PrivateReference);
    names(): a unique base name per example (topics and transactional ids);
    time_rules: enable advance_past_timeout and restart_coordinator (both sides must allow);
    on_step(step_record): called with every compared step (logging, result rows).
    """

    make_target: Callable[[], Any]
    make_reference: Callable[[], Any]
    names: Callable[[], str]
    time_rules: bool = False
    on_step: Callable[[dict[str, Any]], None] | None = None
    close_target: bool = False  # the target backend is owned by the example
    check_reference_oracle: bool = True


def build_machine(config: MachineConfig) -> type[RuleBasedStateMachine]:
    class TxnModelMachine(RuleBasedStateMachine):
        """Transactions on two clusters in lockstep; see the module docstring."""

        def __init__(self) -> None:
            super().__init__()
            self.sides: list[ClusterSide] = []
            self.backends: list[tuple[Any, bool]] = []
            self.steps: list[dict[str, Any]] = []
            self.slots = 0
            self.n_partitions = 1
            self._values = itertools.count(1)

        @initialize(
            slots=st.integers(min_value=2, max_value=3),
            tids=st.integers(min_value=1, max_value=2),
            partitions=st.integers(min_value=1, max_value=2),
        )
        def setup(self, slots: int, tids: int, partitions: int) -> None:
            base = config.names()
            self.slots, self.n_partitions = slots, partitions
            slot_tid = [i % tids for i in range(slots)]
            target = config.make_target()
            self.backends.append((target, config.close_target))
            reference = config.make_reference()
            self.backends.append((reference, True))
            self.sides = [
                ClusterSide("target", target, base, partitions, tids, slot_tid),
                ClusterSide("reference", reference, base, partitions, tids, slot_tid),
            ]
            self._step("setup", {"slots": slots, "tids": tids, "partitions": partitions}, lambda s: {"class": "ok", "error": None})

        # -- lockstep ---------------------------------------------------------------------------

        def _step(self, op: str, args: dict[str, Any], action: Callable[[ClusterSide], dict[str, Any]]) -> None:
            observed = []
            for side in self.sides:
                outcome = action(side)
                observed.append(side.observe(op, args, outcome))
            normalized = [side.normalizer(obs) for side, obs in zip(self.sides, observed)]
            diffs = compare(normalized[0], normalized[1])
            record = {"step": len(self.steps) + 1, "op": op, "args": args, "target": normalized[0], "reference": normalized[1]}
            self.steps.append(record)
            if config.on_step is not None:
                config.on_step(record)
            if diffs:
                lines = "\n".join(f"  {d.path}: target={d.target!r} reference={d.reference!r}" for d in diffs)
                raise AssertionError(
                    f"target and reference disagree after step {record['step']} {op} {args}:\n{lines}"
                )
            self.sides[0].check_oracle(observed[0])
            if config.check_reference_oracle:
                self.sides[1].check_oracle(observed[1])

        def _inst(self, slot: int) -> bool:
            return self.sides[0].instances.get(slot) is not None

        def _in_state(self, *states: str) -> list[int]:
            """Slots whose producer (on the target side) is in one of the client states."""
            out = []
            for i in range(self.slots):
                inst = self.sides[0].instances.get(i) if self.sides else None
                if inst is not None and str(inst.producer.state) in states:
                    out.append(i)
            return out

        # -- the one rule ------------------------------------------------------------------------
        # A single rule that picks the operation itself: Hypothesis' swarm testing (a random
        # subset of rules per example) would otherwise spend whole examples on clock moves.
        # Most calls are made in a client state that allows them (weights below); `misuse`
        # makes any call on any producer (fenced, fatal, outside a transaction).

        def _ops(self) -> list[str]:
            ops = []
            if self._in_state("Ready"):
                ops += ["begin"] * 3
            if self._in_state("InTransaction"):
                ops += ["send"] * 5 + ["commit"] * 2 + ["abort"]
            if self._in_state("AbortableError"):
                ops += ["abort"] * 2
            ops += ["init"]
            if any(self._inst(i) for i in range(self.slots)):
                ops += ["misuse"]
                if config.time_rules:
                    ops += ["advance_past_timeout", "restart_coordinator"]
            return ops

        @precondition(lambda self: bool(self.sides))
        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            op = data.draw(st.sampled_from(self._ops()), label="op")
            if op == "init":
                slot = data.draw(st.integers(0, self.slots - 1), label="slot")
                self._step("init", {"slot": slot}, lambda s: s.op_init(slot))
            elif op == "begin":
                slot = data.draw(st.sampled_from(self._in_state("Ready")), label="slot")
                self._step("begin", {"slot": slot}, lambda s: s.op_begin(slot))
            elif op == "send":
                slot = data.draw(st.sampled_from(self._in_state("InTransaction")), label="slot")
                self._send(slot, data)
            elif op in ("commit", "abort"):
                states = ("InTransaction",) if op == "commit" else ("InTransaction", "AbortableError")
                slot = data.draw(st.sampled_from(self._in_state(*states)), label="slot")
                self._step(op, {"slot": slot}, lambda s: getattr(s, f"op_{op}")(slot))
            elif op == "misuse":
                call = data.draw(st.sampled_from(["send", "commit", "abort", "begin"]), label="call")
                slot = data.draw(st.sampled_from([i for i in range(self.slots) if self._inst(i)]), label="slot")
                if call == "send":
                    self._send(slot, data)
                else:
                    self._step(call, {"slot": slot}, lambda s: getattr(s, f"op_{call}")(slot))
            elif op == "advance_past_timeout":
                ms = TRANSACTION_TIMEOUT_MS + ABORT_SCAN_INTERVAL_MS + 1
                self._step(op, {"ms": ms}, lambda s: s.op_advance_past_timeout())
            elif op == "restart_coordinator":
                self._step(op, {}, lambda s: s.op_restart_coordinator())
            else:  # pragma: no cover
                raise AssertionError(op)

        def _send(self, slot: int, data: st.DataObject) -> None:
            partition = data.draw(st.integers(0, self.n_partitions - 1), label="partition")
            count = data.draw(st.integers(1, 2), label="count")
            values = [f"v{next(self._values)}" for _ in range(count)]
            self._step("send", {"slot": slot, "partition": partition, "values": values}, lambda s: s.op_send(slot, partition, values))

        def teardown(self) -> None:
            for side in self.sides:
                side.close()
            for backend, owned in self.backends:
                if owned:
                    try:
                        backend.close()
                    except Exception:
                        pass

    return TxnModelMachine


def default_settings(max_examples: int = 20, steps: int = 15, shrink: bool = True) -> settings:
    """Derandomized, no database. ``shrink`` False (real clusters): a failure reports the
    whole generated sequence at once instead of minutes of shrinking against a broker."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        phases=phases,
    )


def run_machine(config: MachineConfig, run_settings: settings | None = None) -> None:
    """Run the machine (raises on the first disagreement or oracle violation, after
    Hypothesis has shrunk it to a minimal step sequence)."""
    machine = build_machine(config)
    run_state_machine_as_test(machine, settings=run_settings or default_settings())


def _names_factory(prefix: str) -> Callable[[], str]:
    counter = itertools.count(1)
    token = f"{int(time.time()) % 100000}"
    return lambda: f"{prefix}-{token}-{next(counter)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="target cluster (default: a private reference, i.e. a self check)")
    ap.add_argument("--self-check", action="store_true", help="reference vs reference with the time rules")
    ap.add_argument("--transaction-version", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=1, help="nodes of the private target cluster in --self-check")
    ap.add_argument("--max-examples", type=int, default=20)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    tv = args.transaction_version
    if args.bootstrap and not args.self_check:
        make_target: Callable[[], Any] = lambda: ExistingCluster(args.bootstrap)
        owned = False
    else:
        make_target = lambda: PrivateReference(brokers=args.nodes, transaction_version=tv)
        owned = True
    config = MachineConfig(
        make_target=make_target,
        make_reference=lambda: PrivateReference(transaction_version=tv),
        names=_names_factory("txnmodel"),
        time_rules=args.self_check,
        close_target=owned,
        on_step=(lambda r: print(r["step"], r["op"], r["args"])) if args.verbose else None,
    )
    t0 = time.monotonic()
    run_machine(config, default_settings(args.max_examples, args.steps))
    print(f"ok: {args.max_examples} examples in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
