"""The share-group workload (KIP-932 queues): seeded members that accept, release, reject
and crash, a producer of unique values, and a catch-up read after the final heal.

Members run in one thread, in seeded turns (a member's poll, its acknowledgements, a
``commit_sync``), so the history's real-time order is the order the broker saw their
requests. Every acquisition (``fetch``) and acknowledgement (``ack``, one op per
partition) goes into the run's history through the client seam's outcome table
(``clients.outcomes``: ``share_fetch`` / ``share_ack``); a member whose call raised
is crashed and comes back as a new process (``m2.3``: member 2, incarnation 3), as does a
member the seeded RNG crashes on purpose. Judged by ``checkers.share_group``.
Clients: the reference share consumer (default) or confluent-kafka's ``ShareConsumer``.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka import ShareConsumer as ConfluentShareConsumer

from clients.confluent import quiet_config as _config
from clients.outcomes import OK, classify
from checkers.recorder import Recorder
from checkers.share_history import ShareHistory
from checkers import share_group
from checkers.result import compose
from clients import confluent, share
from reference_impl.client.share_consumer import AcknowledgeType, ShareConsumer

CLIENTS = ("reference", "confluent")
LOCK_MS = 10_000  # share.record.lock.duration.ms for the run's group
POLL_S = 0.3
ACK_WEIGHTS = (("accept", 70), ("release", 15), ("reject", 15))
CRASH_P = 0.03
CATCH_UP_S = 90.0
WARM_UP_S = 60.0


class ShareWorkload:
    """See the module docstring. ``faulted``: the run injects faults (leaders may move, so
    delivery counts may go down, KIP-932 DELIVERY.002)."""

    def __init__(self, seed: int, client: str = "reference", members: int = 3, partitions: int = 3,
                 per_round: int = 3, lock_ms: int = LOCK_MS, faulted: bool = True, max_rounds: int = 10_000) -> None:
        if client not in CLIENTS:
            raise ValueError(f"share client must be one of {', '.join(CLIENTS)}")
        self.seed, self.client, self.n_members, self.partitions = seed, client, members, partitions
        self.per_round, self.lock_ms, self.faulted, self.max_rounds = per_round, lock_ms, faulted, max_rounds
        self.rng = random.Random(seed)
        self.topic = f"chaos-share-{seed}"
        self.group = f"chaos-share-{seed}"
        self.members: dict[int, Any] = {}
        self.process: dict[int, str] = {}
        self._incarnations = itertools.count(1)
        self._values = itertools.count()
        self.produced: set[tuple[str, int]] = set()
        self.settled: set[tuple[str, int]] = set()
        self._producer: Any = None

    history_class = ShareHistory  # the runner validates the recorded history as this

    # ------------------------------------------------------------------ setup

    def setup(self, target: Any, recorder: Recorder) -> None:
        share.require_share_groups(target)
        self.target, self.rec = target, recorder
        confluent.create_topic(target, self.topic, partitions=self.partitions)
        cc = target.cluster_client()
        try:
            share.set_group_configs(cc, self.group, {"share.auto.offset.reset": "earliest",
                                                          "share.record.lock.duration.ms": str(self.lock_ms)})
        finally:
            cc.close()
        for i in range(self.n_members):
            self._start_member(i)
        self._warm_up()

    def _warm_up(self, wait_s: float = WARM_UP_S) -> None:
        """Rounds until every partition has had a record settled: the members are assigned
        and fetching before the first fault (the schedule starts after setup)."""
        deadline = time.monotonic() + wait_s
        keys = {f"{self.topic}-{p}" for p in range(self.partitions)}
        while time.monotonic() < deadline and keys - {k for k, _ in self.settled}:
            self._produce(self.per_round)
            for i in range(self.n_members):
                if i in self.members:
                    self._turn(i, stop_at=deadline, ack="accept")

    def _start_member(self, i: int) -> None:
        name = f"m{i}.{next(self._incarnations)}"
        inv = self.rec.invoke(name, "join")
        try:
            self.members[i] = _MEMBERS[self.client](self.target, self.group, self.topic)
        except Exception as exc:  # noqa: BLE001 - the member never came up
            self.rec.complete(inv, "info", error=repr(exc))
            self.members.pop(i, None)
            return
        self.process[i] = name
        self.rec.complete(inv, OK)

    # ------------------------------------------------------------------ run

    def run(self, stop: threading.Event) -> None:
        for _ in range(self.max_rounds):
            if stop.is_set():
                return
            self._produce(self.per_round)
            for i in self.rng.sample(range(self.n_members), self.n_members):
                if stop.is_set():
                    return
                if i not in self.members:
                    self._start_member(i)
                    continue
                if self.rng.random() < CRASH_P:
                    self._crash(i, "crashed on purpose")
                    continue
                self._turn(i, stop_at=None)

    def _produce(self, n: int) -> None:
        if self._producer is None:
            self._producer = Producer(_config(self.target, {"linger.ms": 0, "acks": "all",
                                                            "message.timeout.ms": 10_000}))
        for _ in range(n):
            v = next(self._values)
            p = v % self.partitions
            key = f"{self.topic}-{p}"
            inv = self.rec.invoke(f"producer-{v}", "produce", {key: [f"v{v}"]})  # sends overlap
            self._producer.produce(self.topic, value=f"v{v}".encode(), partition=p,
                                   on_delivery=lambda err, msg, inv=inv, key=key: self._delivered(inv, key, err, msg))
        self._producer.flush(15)

    def _delivered(self, inv: dict, key: str, err: Any, msg: Any) -> None:
        out = classify("produce", err)
        if out.type == OK:
            self.produced.add((key, msg.offset()))
            self.rec.complete(inv, OK, {key: [[msg.offset(), msg.value().decode()]]})
        else:
            self.rec.complete(inv, out.type, error=out.error)

    def _turn(self, i: int, stop_at: float | None, ack: str | None = None) -> int:
        """One member's poll, acknowledgements and commit; how many records it got."""
        name, m = self.process[i], self.members[i]
        inv = self.rec.invoke(name, "fetch")
        try:
            recs = m.poll(POLL_S)
        except Exception as exc:  # noqa: BLE001 - recorded, then the member is replaced
            out = classify("share_fetch", exc)
            self.rec.complete(inv, out.type, error=out.error)
            self._crash(i, f"poll raised {out.error}")
            return 0
        by_key: dict[str, list] = {}
        for key, offset, value, count, _ in recs:
            by_key.setdefault(key, []).append([offset, value, count])
        self.rec.complete(inv, OK, by_key)
        if not recs:
            return 0
        decisions = [(r, ack or self._decide()) for r in recs]
        try:
            for r, a in decisions:
                m.acknowledge(r[4], a)
            results = m.commit()
        except Exception as exc:  # noqa: BLE001
            out = classify("share_ack", exc)
            for key, entries in _group(decisions).items():
                self.rec.complete(self.rec.invoke(name, "ack", {key: entries}), out.type, error=out.error)
            self._crash(i, f"acknowledge raised {out.error}")
            return len(recs)
        for key, entries in _group(decisions).items():
            ack_inv = self.rec.invoke(name, "ack", {key: entries})
            if key not in results:
                self.rec.complete(ack_inv, "info", error="no result for the partition")
                continue
            out = classify("share_ack", results[key])
            self.rec.complete(ack_inv, out.type, error=out.error)
            if out.type == OK:
                self.settled.update((key, o) for o, a in entries if a in ("accept", "reject"))
        return len(recs)

    def _decide(self) -> str:
        r = self.rng.randrange(100)
        for name, weight in ACK_WEIGHTS:
            if r < weight:
                return name
            r -= weight
        return "accept"

    def _crash(self, i: int, why: str) -> None:
        name, m = self.process.pop(i), self.members.pop(i)
        inv = self.rec.invoke(name, "crash")
        try:
            m.crash()
        except Exception:  # noqa: BLE001 - it is going away either way
            pass
        self.rec.complete(inv, "info", error=why)

    # ------------------------------------------------------------------ after the heal

    def catch_up(self, timeout_s: float = CATCH_UP_S) -> None:
        """Members accept everything until every produced record is settled and a whole
        round delivers nothing more (a redelivery after the heal must be seen), or time is up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = 0
            for i in range(self.n_members):
                if i not in self.members:
                    self._start_member(i)
                    got += 1  # a fresh member has not polled yet: not quiet
                else:
                    got += self._turn(i, stop_at=deadline, ack="accept")
            if got == 0 and not self.produced - self.settled:
                break
            if got == 0:
                time.sleep(0.05)
        for i in list(self.members):
            name = self.process[i]
            inv = self.rec.invoke(name, "leave")
            try:
                self.members.pop(i).close()
                self.rec.complete(inv, OK)
            except Exception as exc:  # noqa: BLE001
                self.rec.complete(inv, "info", error=repr(exc))
        if self._producer is not None:
            self._producer.flush(5)

    def role_keys(self) -> dict[str, object]:
        """What aims a role fault at this run: the share group and its topic's partition 0."""
        return {"group": self.group, "topic": self.topic, "partition": 0}

    def teardown(self) -> None:
        """Nothing to stop: the members are clients in this process, ended with the run."""

    def check(self, history: Any) -> dict:
        ops = [op.to_dict() for op in history if op.process != "nemesis"]
        shares = ShareHistory.from_list([{**op, "index": n} for n, op in enumerate(ops)]).validate()
        allowed = share_group.allowed_error_types(failover=self.faulted)
        return compose({"share-group": share_group.check(shares, allowed=allowed, lock_duration_ms=self.lock_ms)})


def _group(decisions: list[tuple[tuple, str]]) -> dict[str, list]:
    out: dict[str, list] = {}
    for r, a in decisions:
        out.setdefault(r[0], []).append([r[1], a])
    return out


class _ReferenceMember:
    """The reference share consumer (explicit mode); crash = its sockets closed under it."""

    def __init__(self, target: Any, group: str, topic: str) -> None:
        self._cc = target.cluster_client()
        self.consumer = ShareConsumer(target.bootstrap_servers, group, "explicit", cluster=self._cc,
                                      fetch_max_wait_ms=200, request_timeout_ms=8_000)
        self.consumer.subscribe([topic])

    def poll(self, timeout_s: float) -> list[tuple]:
        return [(f"{r.topic}-{r.partition}", r.offset, (r.value or b"").decode(), r.delivery_count, r)
                for r in self.consumer.poll(int(timeout_s * 1000))]

    def acknowledge(self, handle: Any, ack: str) -> None:
        self.consumer.acknowledge(handle, AcknowledgeType[ack.upper()])

    def commit(self) -> dict[str, Any]:
        return {f"{t}-{p}": exc for (t, p), exc in self.consumer.commit_sync().items()}

    def close(self) -> None:
        self.consumer.close(timeout_ms=10_000)

    def crash(self) -> None:
        self._cc.close()


class _ConfluentMember:
    """confluent-kafka's ShareConsumer (explicit mode); crash = close without acknowledging."""

    _ACKS = {"accept": 1, "release": 2, "reject": 3}

    def __init__(self, target: Any, group: str, topic: str) -> None:
        self.consumer = ConfluentShareConsumer(_config(target, {"group.id": group,
                                                                 "share.acknowledgement.mode": "explicit"}))
        self.consumer.subscribe([topic])

    def poll(self, timeout_s: float) -> list[tuple]:
        out = []
        for msg in self.consumer.poll(timeout_s):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append((f"{msg.topic()}-{msg.partition()}", msg.offset(), (msg.value() or b"").decode(),
                        msg.delivery_count(), msg))
        return out

    def acknowledge(self, handle: Any, ack: str) -> None:
        self.consumer.acknowledge(handle, self._ACKS[ack])

    def commit(self) -> dict[str, Any]:
        return {f"{tp.topic}-{tp.partition}": exc for tp, exc in self.consumer.commit_sync(15).items()}

    def close(self) -> None:
        self.consumer.close()

    def crash(self) -> None:
        self.consumer.close()


_MEMBERS = {"reference": _ReferenceMember, "confluent": _ConfluentMember}
