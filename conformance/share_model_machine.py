"""Model-based differential testing of share groups (KIP-932) with Hypothesis.

A `RuleBasedStateMachine` drives random sequences of share-group operations on one
share-partition against two clusters in lockstep:

* the *target* side: the cluster under test (kafka-native, or the reference itself);
* the *reference* side: a private `ThreadedReferenceCluster` per example, configured like
  the reference target (`targets.reference_target.reference_target_config`).

Each side has one topic (one partition), one share group whose configs are set first
(`share.auto.offset.reset=earliest`, `share.record.lock.duration.ms=LOCK_MS`), and 2-3
member slots driven over the raw protocol (`clients.share`): a slot joins
(ShareGroupHeartbeat until assigned, then a share session on the partition leader), leaves
(final ShareAcknowledge, epoch -1, then a leave heartbeat), fetches (ShareFetch), and
acknowledges offsets with ACCEPT / RELEASE / REJECT (ShareAcknowledge) -- usually offsets
it holds, sometimes (``misuse``) offsets another slot holds or that are settled. Other
steps produce records and let time pass beyond the lock duration.

Every step's outcome is normalized and compared between the sides: error codes, and for
a fetch the acquired records *per offset* with their delivery counts (Kafka 4.1 reports
acquired records one offset at a time, 4.4 and the reference as ranges). Member ids and
topic ids never appear in observations (slots stand for members). Each side is also
checked against `SharePartitionModel`, the abstract share-partition (per offset:
available / acquired by a slot / acknowledged / archived, with its delivery count): a fetch
acquires exactly the available offsets, each with its count plus one; acknowledgements of
held records succeed and apply atomically; acknowledgements of records the slot does not
hold are INVALID_RECORD_STATE and change nothing; RELEASE at the delivery limit, and lock
expiry at the limit, archive.

Time. Kafka runs record locks on wall clock, so on a real target waiting is real: the
``wait`` step sleeps until every lock taken on either side has surely expired (lock
duration past the response that acquired it, plus a margin). A lock must never expire in
the middle of other steps (the two sides would diverge by timing alone): before every step
the machine forces a ``wait`` when a lock on either side is older than the lock duration
minus a margin, and joins (slow on Kafka) only run while no slot holds anything. In the
reference-vs-reference self check both sides run on a `ManualClock`, and ``wait`` moves
both clocks instead (no sleeping).

Kafka 4.1.2 decrements the delivery count of the records a closing share session releases
(docs/share-groups-kip-vs-kafka.md item 11); against a 4.1 target the private reference
and the model are configured the same way (``close_decrements_count``), which the test
reports.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from clients import share
from clients.normalize import compare
from clients.wire import create_topic
from clients.share import ACCEPT, REJECT, RELEASE, ShareSession
from targets.reference_target import reference_target_config
from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.clock import ManualClock
from reference_impl.server.broker_server import ThreadedReferenceCluster
from kio.schema.errors import ErrorCode

__all__ = ["ExistingCluster", "MachineConfig", "PrivateReference", "ShareSide", "SharePartitionModel",
           "build_machine", "default_settings", "run_machine"]

LOCK_MS = 2000
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit default (the model's; both sides use it)
EXPIRY_MARGIN_S = 0.9
"""A lock older than LOCK_MS - this forces a wait before the next step."""
WAIT_SLACK_S = 0.4
"""Sleep this long past the lock duration: Kafka's expiry timer fires a little late."""
FETCH_WAIT_MS = 300
NONE, INVALID_RECORD_STATE, INVALID_SHARE_SESSION_EPOCH = ErrorCode.none, ErrorCode.invalid_record_state, ErrorCode.invalid_share_session_epoch
FETCH_ATTEMPTS = 3
ACK_NAMES = {ACCEPT: "accept", RELEASE: "release", REJECT: "reject"}
OPS = ("ack", "wait", "fetch", "produce", "misuse", "ack", "fetch", "leave", "join", "ack", "fetch", "produce")
"""Operations to draw from, weighted by repetition. Derandomized generation and shrinking
favour the first ones, so acknowledging comes first (it falls back to join / fetch /
produce while nothing is held)."""


# -- backends ------------------------------------------------------------------------------------


class PrivateReference:
    """A fresh reference cluster for one example, on wall clock or on a ManualClock."""

    kind = "reference"

    def __init__(self, manual_clock: bool = False, close_decrements_count: bool = False) -> None:
        config = reference_target_config()
        config.share_partition = dataclasses.replace(
            config.share_partition, release_on_close_decrements_delivery_count=close_decrements_count)
        # producer CreateTime must be near the broker's clock: start the manual clock at wall time
        self.clock = ManualClock(start_ms=int(time.time() * 1000)) if manual_clock else None
        self.cluster = ThreadedReferenceCluster(brokers=1, clock=self.clock, config=config).start()

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    @property
    def can_control_time(self) -> bool:
        return self.clock is not None

    def advance(self, ms: int) -> None:
        assert self.clock is not None
        self.clock.advance(ms)

    def close(self) -> None:
        self.cluster.stop()


class ExistingCluster:
    """The cluster under test (not owned by the machine; wall clock)."""

    kind = "target"
    can_control_time = False

    def __init__(self, bootstrap_servers: str, provision_topic: Callable[[str, int], None] | None = None,
                 security: Any = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # the raw client's ClientSecurity (TLS/SASL) for this cluster
        self.provision_topic = provision_topic

    def advance(self, ms: int) -> None:  # pragma: no cover - guarded by can_control_time
        raise RuntimeError("this cluster's clock cannot be moved")

    def close(self) -> None:
        pass


# -- the abstract share-partition ------------------------------------------------------------------


@dataclass
class OffsetState:
    state: str = "available"  # available | acquired | acknowledged | archived
    count: int = 0
    holder: int | None = None


@dataclass
class SharePartitionModel:
    """The share-partition as KIP-932 describes it, per offset (pure; no clock, no I/O)."""

    delivery_limit: int = DELIVERY_LIMIT
    close_decrements_count: bool = False
    offsets: dict[int, OffsetState] = field(default_factory=dict)
    fetched_end: int = -1
    """Highest offset ever acquired (acknowledgements beyond it are malformed)."""

    def produced(self, base: int, count: int) -> None:
        for o in range(base, base + count):
            self.offsets[o] = OffsetState()

    @property
    def spso(self) -> int:
        """First offset not yet acknowledged or archived (the end if none)."""
        for o in sorted(self.offsets):
            if self.offsets[o].state in ("available", "acquired"):
                return o
        return max(self.offsets, default=-1) + 1

    def held_by(self, slot: int) -> list[int]:
        return sorted(o for o, s in self.offsets.items() if s.state == "acquired" and s.holder == slot)

    def held(self) -> list[int]:
        return sorted(o for o, s in self.offsets.items() if s.state == "acquired")

    def expected_fetch(self) -> dict[int, int]:
        """What the next fetch must acquire: every available offset, count + 1."""
        return {o: s.count + 1 for o, s in sorted(self.offsets.items()) if s.state == "available"}

    def acquire(self, slot: int, got: dict[int, int]) -> None:
        for o, count in got.items():
            s = self.offsets.setdefault(o, OffsetState())
            s.state, s.count, s.holder = "acquired", count, slot
            self.fetched_end = max(self.fetched_end, o)

    def expected_ack(self, slot: int, offsets: list[int]) -> int | None:
        """Error code the partition must answer; None when the model cannot tell (offsets
        never acquired: Kafka answers INVALID_REQUEST beyond the fetched end)."""
        relevant = [o for o in offsets if o >= self.spso]  # below the SPSO: ignored
        if any(o > self.fetched_end or o not in self.offsets for o in relevant):
            return None
        ok = all(self.offsets[o].state == "acquired" and self.offsets[o].holder == slot for o in relevant)
        return NONE if ok else INVALID_RECORD_STATE

    def acknowledge(self, slot: int, offsets: list[int], ack: int) -> None:
        for o in offsets:
            s = self.offsets.get(o)
            if s is None or s.state != "acquired" or s.holder != slot:
                continue
            s.holder = None
            if ack == ACCEPT:
                s.state = "acknowledged"
            elif ack == REJECT:
                s.state = "archived"
            else:
                s.state = "archived" if s.count >= self.delivery_limit else "available"

    def close(self, slot: int) -> None:
        """The slot's session closed: what it held goes back (4.1.2: count - 1)."""
        for o in self.held_by(slot):
            s = self.offsets[o]
            s.holder = None
            if self.close_decrements_count:
                s.count -= 1
                s.state = "available"
            else:
                s.state = "archived" if s.count >= self.delivery_limit else "available"

    def expire(self) -> None:
        for o in self.held():
            s = self.offsets[o]
            s.holder = None
            s.state = "archived" if s.count >= self.delivery_limit else "available"

    def snapshot(self) -> dict[str, Any]:
        return {str(o): [s.state, s.count, s.holder] for o, s in sorted(self.offsets.items())}


class OracleViolation(AssertionError):
    pass


# -- one side ---------------------------------------------------------------------------------------


class ShareSide:
    """One cluster: its topic, group, member slots, and the model of its share-partition."""

    def __init__(self, name: str, backend: Any, base: str, slots: int, close_decrements_count: bool) -> None:
        self.name, self.backend = name, backend
        self.topic, self.group = f"{base}-t", f"{base}-g"
        self.cc = ClusterClient(backend.bootstrap_servers, security=getattr(backend, "security", None))
        self.model = SharePartitionModel(close_decrements_count=close_decrements_count)
        self.sessions: dict[int, ShareSession | None] = {s: None for s in range(slots)}
        self.members: dict[int, str] = {}
        self.acquired_after: dict[int, float] = {}
        """offset -> monotonic time the fetch that acquired it had been sent (lock start bound)."""
        self.acquired_by: dict[int, float] = {}
        """offset -> monotonic time that fetch's response arrived."""
        self._create_topic()
        share.set_group_configs(self.cc, self.group, {
            "share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS)})

    def _create_topic(self) -> None:
        provision = getattr(self.backend, "provision_topic", None)
        if provision is not None:
            provision(self.topic, 1)
        else:
            code = create_topic(self.cc, self.topic, partitions=1)
            if code not in (0, 36):
                raise RuntimeError(f"{self.name}: CreateTopics {self.topic} failed with error {code}")
        deadline = time.monotonic() + 30
        while True:
            t = next((t for t in self.cc.refresh([self.topic]).topics if t.name == self.topic), None)
            if t is not None and t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
                self.topic_id: uuid.UUID = t.topic_id
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: {self.topic} has no leader")
            time.sleep(0.05)

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return (self.topic_id, 0)

    def close(self) -> None:
        for slot, s in self.sessions.items():
            if s is not None:
                try:
                    self.op_leave(slot)
                except Exception:
                    pass
        self.cc.close()

    # -- operations (each returns the normalized outcome) ---------------------------------------

    def op_produce(self, values: list[str]) -> dict[str, Any]:
        base = share.produce_values(self.cc, self.topic, [v.encode() for v in values])
        self.model.produced(base, len(values))
        return {"base_offset": base}

    def op_join(self, slot: int) -> dict[str, Any]:
        member, _ = share.join_share_group(self.cc, self.group, [self.topic])
        self.members[slot] = member
        self.sessions[slot] = ShareSession(self.cc.leader_for(self.topic, 0), self.group, member)
        return {"joined": True}

    def op_leave(self, slot: int) -> dict[str, Any]:
        session = self.sessions[slot]
        assert session is not None
        out: dict[str, Any] = {"session_closed": session.epoch > 0}
        if session.epoch > 0:  # a session exists only once a fetch opened it (epoch 0)
            resp = session.close()
            out.update(error=int(resp.error_code), partitions=share.ack_codes(resp))
        share.leave_share_group(self.cc, self.group, self.members.pop(slot))
        self.sessions[slot] = None
        if out.get("error", NONE) == NONE:
            self.model.close(slot)
        return out

    def op_fetch(self, slot: int) -> dict[str, Any]:
        """ShareFetch; while the model expects records and fewer came, fetch again (up to
        FETCH_ATTEMPTS): Kafka may answer a session's first fetch of a share-partition
        before the partition is ready. The acquired records of all attempts are the outcome."""
        session = self.sessions[slot]
        assert session is not None
        expected = self.model.expected_fetch()
        got: dict[int, int] = {}
        sent = time.monotonic()
        code = NONE
        for _ in range(FETCH_ATTEMPTS):
            resp = session.fetch([self.key], max_wait_ms=FETCH_WAIT_MS)
            code = int(resp.error_code)
            got.update(share.delivery_counts(resp))
            if code != NONE or not expected or set(expected) <= set(got):
                break
        done = time.monotonic()
        for o in got:
            self.acquired_after[o], self.acquired_by[o] = sent, done
        if code == NONE:
            self.model.acquire(slot, got)
        return {"error": code, "acquired": {str(o): c for o, c in sorted(got.items())},
                "_expected": {str(o): c for o, c in expected.items()}}

    def op_ack(self, slot: int, offsets: list[int], ack: int) -> dict[str, Any]:
        """ShareAcknowledge. A member that never fetched has no share session: epoch 0 may
        not carry acknowledgements (INVALID_SHARE_SESSION_EPOCH at the top level)."""
        session = self.sessions[slot]
        assert session is not None
        if session.epoch == 0:
            expected = {"error": INVALID_SHARE_SESSION_EPOCH, "partition_error": None}
        else:
            expected = {"error": NONE, "partition_error": self.model.expected_ack(slot, offsets)}
        resp = session.ack({self.key: [(o, o, [ack]) for o in offsets]})
        code = share.ack_codes(resp).get(0, int(resp.error_code))
        if int(resp.error_code) == NONE and code == NONE:
            self.model.acknowledge(slot, offsets, ack)
        return {"error": int(resp.error_code), "partition_error": code, "_expected": expected}

    def op_wait(self, manual: bool) -> dict[str, Any]:
        """Locks have expired (the machine slept, or moved the clock, for both sides)."""
        if manual:
            self.backend.advance(LOCK_MS + 1)
        self.model.expire()
        self.acquired_after.clear()
        self.acquired_by.clear()
        return {"expired": True}

    # -- timing --------------------------------------------------------------------------------

    def oldest_lock_age(self) -> float:
        held = self.model.held()
        if not held:
            return 0.0
        return time.monotonic() - min(self.acquired_after.get(o, time.monotonic()) for o in held)

    def all_locks_expired_at(self) -> float:
        held = self.model.held()
        return max((self.acquired_by.get(o, time.monotonic()) for o in held), default=0.0) + LOCK_MS / 1000 + WAIT_SLACK_S

    # -- oracle ------------------------------------------------------------------------------

    def check_oracle(self, op: str, args: dict[str, Any], outcome: dict[str, Any]) -> None:
        problems = []
        if op == "fetch" and outcome["error"] == NONE and outcome["acquired"] != outcome["_expected"]:
            problems.append(f"fetch acquired {outcome['acquired']}, model expects {outcome['_expected']}")
        if op in ("ack", "misuse"):
            want = outcome["_expected"]
            if outcome["error"] != want["error"] or (
                    want["partition_error"] is not None and outcome["partition_error"] != want["partition_error"]):
                problems.append(f"acknowledgement answered error {outcome['error']} / partition "
                                f"{outcome['partition_error']}, model expects {want}")
        if op == "leave" and outcome.get("error", NONE) != NONE:
            problems.append(f"closing the share session answered {outcome['error']}")
        if problems:
            raise OracleViolation(f"{self.name} after {op} {args}: " + "; ".join(problems)
                                  + f"\n  model: {self.model.snapshot()}")


def _public(outcome: dict[str, Any]) -> dict[str, Any]:
    """The comparable part of an outcome (model expectations are per side)."""
    return {k: v for k, v in outcome.items() if not k.startswith("_")}


# -- the machine ---------------------------------------------------------------------------------


@dataclass
class MachineConfig:
    """make_target() / make_reference(): the two backends of an example; names(): a unique
    base name per example; manual_clock: both backends are PrivateReference on a ManualClock
    (``wait`` moves the clocks); close_decrements_count: Kafka 4.1.2's session-close rule on
    the reference side and in both models; on_step(record): every compared step."""

    make_target: Callable[[], Any]
    make_reference: Callable[[], Any]
    names: Callable[[], str]
    manual_clock: bool = False
    close_decrements_count: bool = False
    close_target: bool = False
    on_step: Callable[[dict[str, Any]], None] | None = None


def build_machine(config: MachineConfig) -> type[RuleBasedStateMachine]:
    class ShareModelMachine(RuleBasedStateMachine):
        """Share groups on two clusters in lockstep; see the module docstring."""

        def __init__(self) -> None:
            super().__init__()
            self.sides: list[ShareSide] = []
            self.backends: list[tuple[Any, bool]] = []
            self.steps: list[dict[str, Any]] = []
            self.slots = 0
            self._values = itertools.count(1)

        @initialize(slots=st.integers(min_value=2, max_value=3))
        def setup(self, slots: int) -> None:
            base = config.names()
            self.slots = slots
            target = config.make_target()
            self.backends.append((target, config.close_target))
            reference = config.make_reference()
            self.backends.append((reference, True))
            self.sides = [ShareSide("target", target, base, slots, config.close_decrements_count),
                          ShareSide("reference", reference, base, slots, config.close_decrements_count)]

        # -- lockstep

        def _step(self, op: str, args: dict[str, Any], action: Callable[[ShareSide], dict[str, Any]]) -> None:
            outcomes = [action(side) for side in self.sides]
            public = [_public(o) for o in outcomes]
            record = {"step": len(self.steps) + 1, "op": op, "args": args, "target": public[0], "reference": public[1]}
            self.steps.append(record)
            if config.on_step is not None:
                config.on_step(record)
            diffs = compare(public[0], public[1])
            if diffs:
                lines = "\n".join(f"  {d.path}: target={d.target!r} reference={d.reference!r}" for d in diffs)
                raise AssertionError(f"target and reference disagree after step {record['step']} {op} {args}:\n{lines}")
            for side, outcome in zip(self.sides, outcomes):
                side.check_oracle(op, args, outcome)

        def _wait(self, forced: bool) -> None:
            if not config.manual_clock:
                until = max(side.all_locks_expired_at() for side in self.sides)
                time.sleep(max(0.0, until - time.monotonic()))
            self._step("wait", {"ms": LOCK_MS, "forced": forced}, lambda s: s.op_wait(config.manual_clock))

        def _expire_if_due(self) -> None:
            """Let locks expire *between* steps, never during one (see the module docstring)."""
            if config.manual_clock:
                return
            if max(side.oldest_lock_age() for side in self.sides) > LOCK_MS / 1000 - EXPIRY_MARGIN_S:
                self._wait(forced=True)

        # -- what can run now (decided on the target side's model; both sides agree so far)

        def _joined(self) -> list[int]:
            return [s for s, sess in self.sides[0].sessions.items() if sess is not None]

        def _misuse_offsets(self, slot: int) -> list[int]:
            """Offsets the slot may not acknowledge: held by another slot, settled, or released."""
            model = self.sides[0].model
            return [o for o in range(model.fetched_end + 1) if o not in model.held_by(slot)]

        def _resolve(self, wanted: str) -> str:
            """The operation to run: the drawn one when it applies now, else the first that
            does of join, fetch (records available), produce (every step draws the same values whatever the
            state, so Hypothesis can replay and shrink a sequence although the clusters'
            answers decide which operations apply)."""
            model = self.sides[0].model
            joined = self._joined()
            applies = {
                "join": len(joined) < self.slots and not model.held(),
                "fetch": bool(joined),
                "leave": bool(joined),
                "ack": any(model.held_by(s) for s in joined),
                "wait": bool(model.held()),
                "misuse": any(self._misuse_offsets(s) for s in joined),
                "produce": True,
            }
            if applies[wanted]:
                return wanted
            if applies["join"]:
                return "join"
            return "fetch" if joined and model.expected_fetch() else "produce"

        @staticmethod
        def _pick(items: list[Any], index: int) -> Any:
            return items[index % len(items)]

        @precondition(lambda self: bool(self.sides))
        @rule(op=st.sampled_from(OPS), index=st.integers(0, 11), mask=st.integers(1, 255),
              ack=st.sampled_from([ACCEPT, RELEASE, REJECT]), count=st.integers(1, 3))
        def step(self, op: str, index: int, mask: int, ack: int, count: int) -> None:
            self._expire_if_due()
            op = self._resolve(op)
            model = self.sides[0].model
            joined = self._joined()
            if op == "produce":
                values = [f"v{next(self._values)}" for _ in range(count)]
                self._step(op, {"values": values}, lambda s: s.op_produce(values))
            elif op == "join":
                slot = self._pick([s for s in range(self.slots) if s not in joined], index)
                self._step(op, {"slot": slot}, lambda s: s.op_join(slot))
            elif op in ("leave", "fetch"):
                slot = self._pick(joined, index)
                self._step(op, {"slot": slot}, lambda s: getattr(s, f"op_{op}")(slot))
            elif op == "ack":
                slot = self._pick([s for s in joined if model.held_by(s)], index)
                held = model.held_by(slot)
                offsets = [o for i, o in enumerate(held) if mask >> (i % 8) & 1] or held[:1]
                self._ack(op, slot, offsets, ack)
            elif op == "misuse":
                slot = self._pick([s for s in joined if self._misuse_offsets(s)], index)
                offsets = [self._pick(self._misuse_offsets(slot), mask)]
                self._ack(op, slot, offsets, ack)
            elif op == "wait":
                self._wait(forced=False)
            else:  # pragma: no cover
                raise AssertionError(op)

        def _ack(self, op: str, slot: int, offsets: list[int], ack: int) -> None:
            args = {"slot": slot, "offsets": offsets, "type": ACK_NAMES[ack]}
            self._step(op, args, lambda s: s.op_ack(slot, offsets, ack))

        def teardown(self) -> None:
            for side in self.sides:
                side.close()
            for backend, owned in self.backends:
                if owned:
                    try:
                        backend.close()
                    except Exception:
                        pass

    return ShareModelMachine


def default_settings(max_examples: int = 4, steps: int = 10, shrink: bool = True) -> settings:
    """Derandomized, no database. ``shrink`` False (real clusters): a failure reports the
    whole generated sequence at once instead of minutes of shrinking against a broker."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(max_examples=max_examples, stateful_step_count=steps, deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck), print_blob=False, phases=phases)


def run_machine(config: MachineConfig, run_settings: settings | None = None) -> None:
    """Run the machine; raises on the first disagreement or oracle violation, after
    Hypothesis has shrunk it to a minimal step sequence."""
    run_state_machine_as_test(build_machine(config), settings=run_settings or default_settings())
