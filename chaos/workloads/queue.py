"""Jepsen's Kafka queue workload over confluent-kafka (``jepsen.tests.kafka``).

Each process (a thread) owns a transactional producer, an idempotent producer and a
read_committed consumer, and draws its next op from a seeded generator: ``txn`` (an
optional poll, 1-3 sends, an intra-transaction delay, commit or a random abort),
``send`` (plain idempotent sends), ``poll``, ``assign`` (or ``subscribe``). Values are
unique across the run, so every observed value names its writer. After any error the
process's clients are rebuilt (a crash), as Jepsen's processes are. Completions go
through ``clients.outcomes``. ``catch_up`` reads every partition from the start
at read_committed up to its high watermark.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from checkers.kafka_queue import allowed_error_types, check
from clients.outcomes import FAIL, INFO, OK, classify
from clients.confluent import quiet_config as _config
from checkers.recorder import Recorder
from checkers.result import compose
from clients import confluent

CLIENT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Step:
    """One generated op: what a process does next (pure data, from the seeded generator)."""

    f: str
    keys: tuple[int, ...] = ()
    poll_first: bool = False
    delay_s: float = 0.0
    abort: bool = False


def generate(rng: random.Random, partitions: int, subscribe: bool = False) -> Step:
    """The next op of a process: mostly transactions, some plain sends, polls, re-assigns."""
    r = rng.random()
    if r < 0.45:
        keys = tuple(rng.randrange(partitions) for _ in range(rng.randint(1, 3)))
        return Step("txn", keys, poll_first=rng.random() < 0.3,
                    delay_s=rng.choice((0.0, 0.0, 0.02, 0.1)), abort=rng.random() < 0.1)
    if r < 0.6:
        return Step("send", tuple(rng.randrange(partitions) for _ in range(rng.randint(1, 2))))
    if r < 0.95:
        return Step("poll")
    k = rng.randint(1, partitions)
    return Step("subscribe" if subscribe else "assign", tuple(sorted(rng.sample(range(partitions), k))))


class QueueWorkload:
    name = "queue"

    def __init__(self, seed: int, processes: int = 3, partitions: int = 4, max_ops: int = 400,
                 subscribe: bool = False, replication_factor: int = -1) -> None:
        self.seed, self.processes, self.partitions = seed, processes, partitions
        self.max_ops, self.subscribe = max_ops, subscribe
        self.replication_factor = replication_factor
        self.topic = f"chaos-queue-{seed}-{random.Random(seed).randrange(1 << 30):x}"
        self._values = itertools.count(1)
        self._budget = itertools.count(1)
        self._lock = threading.Lock()
        self.target: Any = None
        self.rec: Recorder | None = None

    # ------------------------------------------------------------------ lifecycle

    def setup(self, target: Any, recorder: Recorder) -> None:
        self.target, self.rec = target, recorder
        if self.replication_factor == -1:
            confluent.create_topic(target, self.topic, partitions=self.partitions)
            return
        admin = confluent.admin(target)  # kept alive until the topic exists
        futures = admin.create_topics([NewTopic(self.topic, self.partitions, replication_factor=self.replication_factor)])
        futures[self.topic].result(30)

    def run(self, stop: threading.Event) -> None:
        threads = [threading.Thread(target=self._process, args=(i, stop), name=f"queue-{i}", daemon=True)
                   for i in range(self.processes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _key(self, p: int) -> str:
        return f"{self.topic}-{p}"

    def _next_value(self) -> int:
        with self._lock:
            return next(self._values)

    def _spend(self) -> bool:
        with self._lock:
            return next(self._budget) <= self.max_ops

    # ------------------------------------------------------------------ one process

    def _process(self, i: int, stop: threading.Event) -> None:
        rng = random.Random(self.seed * 1000 + i)
        clients = _Clients(self, i)
        try:
            while not stop.is_set() and self._spend():
                step = generate(rng, self.partitions, self.subscribe)
                clients.consumer()  # built (and its assign recorded) before any op opens
                ok = getattr(self, f"_do_{step.f}")(i, step, clients)
                if not ok:
                    clients.rebuild()
        finally:
            clients.close()

    def _do_assign(self, i: int, step: Step, c: "_Clients") -> bool:
        keys = [self._key(p) for p in step.keys]
        inv = self.rec.invoke(i, "assign", keys)
        c.consumer().assign([TopicPartition(self.topic, p) for p in step.keys])
        self.rec.complete(inv, OK)
        return True

    def _do_subscribe(self, i: int, step: Step, c: "_Clients") -> bool:
        inv = self.rec.invoke(i, "subscribe", [self._key(p) for p in range(self.partitions)])
        c.consumer().subscribe([self.topic])
        self.rec.complete(inv, OK)
        return True

    def _poll(self, c: "_Clients") -> list:
        msgs = c.consumer().consume(num_messages=50, timeout=0.3)
        reads: dict[str, list] = {}
        for m in msgs:
            if m.error():
                raise KafkaException(m.error())
            reads.setdefault(self._key(m.partition()), []).append([m.offset(), int(m.value())])
        return ["poll", reads]

    def _do_poll(self, i: int, step: Step, c: "_Clients") -> bool:
        inv = self.rec.invoke(i, "poll", [["poll"]])
        try:
            mop = self._poll(c)
        except Exception as exc:  # noqa: BLE001 - classified by the outcome table
            out = classify("poll", exc)
            self.rec.complete(inv, out.type, error=f"{out.error}: {out.reason}")
            return False
        self.rec.complete(inv, OK, [mop])
        return True

    def _sends(self, step: Step) -> list[tuple[int, int]]:
        return [(p, self._next_value()) for p in step.keys]

    def _produce(self, producer: Any, sends: list[tuple[int, int]]) -> list[list]:
        """Produce and wait for delivery; returns [partition, offset|None, error|None] per send."""
        results: list[list] = [[p, None, None] for p, _ in sends]

        def cb(j: int):
            def done(err, msg):
                results[j][1 if err is None else 2] = msg.offset() if err is None else err
            return done
        for j, (p, v) in enumerate(sends):
            producer.produce(self.topic, value=str(v).encode(), partition=p, on_delivery=cb(j))
        left = producer.flush(CLIENT_TIMEOUT_S)
        if left:
            raise TimeoutError(f"{left} sends undelivered after {CLIENT_TIMEOUT_S}s")
        return results

    def _do_send(self, i: int, step: Step, c: "_Clients") -> bool:
        sends = self._sends(step)
        inv = self.rec.invoke(i, "send", [["send", self._key(p), v] for p, v in sends])
        try:
            results = self._produce(c.idempotent(), sends)
        except Exception as exc:  # noqa: BLE001
            out = classify("produce", exc)
            self.rec.complete(inv, out.type, error=f"{out.error}: {out.reason}")
            return False
        errors = [r[2] for r in results if r[2] is not None]
        value = [["send", self._key(p), v if off is None else [off, v]]
                 for (p, off, _), (_, v) in zip(results, sends)]
        if not errors:
            self.rec.complete(inv, OK, value)
            return True
        outs = [classify("produce", e) for e in errors]
        # A mix is indeterminate: some sends landed, and the op is one unit in the history.
        type_ = FAIL if len(errors) == len(sends) and all(o.type == FAIL for o in outs) else INFO
        self.rec.complete(inv, type_, value, error="; ".join(f"{o.error}: {o.reason}" for o in outs))
        return False

    def _do_txn(self, i: int, step: Step, c: "_Clients") -> bool:
        sends = self._sends(step)
        mops: list = ([["poll"]] if step.poll_first else []) + [["send", self._key(p), v] for p, v in sends]
        inv = self.rec.invoke(i, "txn", mops)
        stage, value = "init", mops
        try:
            producer = c.transactional()
            stage = "produce"
            producer.begin_transaction()
            done: list = []
            if step.poll_first:
                done.append(self._poll(c))
            results = self._produce(producer, sends)
            bad = [r[2] for r in results if r[2] is not None]
            if bad:
                raise KafkaException(bad[0])
            done += [["send", self._key(p), [off, v]] for (p, off, _), (_, v) in zip(results, sends)]
            value = done
            if step.delay_s:
                time.sleep(step.delay_s)
            if step.abort:
                stage = "abort"
                producer.abort_transaction(CLIENT_TIMEOUT_S)
                self.rec.complete(inv, FAIL, mops, error="aborted by the workload")
                return True
            stage = "commit"
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            self._txn_failed(inv, stage, exc, c, value)
            return False
        self.rec.complete(inv, OK, value)
        return True

    def _txn_failed(self, inv: dict, stage: str, exc: BaseException, c: "_Clients", value: list) -> None:
        """An abortable error before the commit is sent: abort, and the txn definitely
        failed; otherwise the outcome table decides (a commit that timed out is info)."""
        op = {"init": "init", "produce": "commit", "abort": "abort", "commit": "commit"}[stage]
        out = classify(op, exc)
        err = getattr(exc, "args", [None])[0] if getattr(exc, "args", None) else None
        requires_abort = bool(getattr(err, "txn_requires_abort", lambda: False)())
        type_ = out.type
        if stage == "init":
            type_ = FAIL  # begin_transaction never ran: nothing was written in this txn
        elif type_ != FAIL and (stage == "produce" or requires_abort):
            # The commit was never sent (librdkafka: abortable): if the abort lands, the
            # transaction definitely did not commit.
            try:
                c.transactional().abort_transaction(CLIENT_TIMEOUT_S)
                type_ = FAIL
            except Exception:  # noqa: BLE001 - still indeterminate
                pass
        self.rec.complete(inv, type_, value if type_ != FAIL else inv["value"],
                          error=f"{out.error}: {out.reason}")

    # ------------------------------------------------------------------ catch-up

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read every partition from the start up to its high watermark (read_committed
        reaches it once every transaction is decided), as process ``final``."""
        consumer = Consumer(_config(self.target, {"group.id": f"{self.topic}-final", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": False}))
        inv = self.rec.invoke("final", "poll", [["poll"]])
        reads: dict[str, list] = {self._key(p): [] for p in range(self.partitions)}
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for m in consumer.consume(num_messages=500, timeout=0.5):
                    if not m.error():
                        reads[self._key(m.partition())].append([m.offset(), int(m.value())])
                if self._caught_up(consumer):
                    break
        except Exception as exc:  # noqa: BLE001
            self.rec.complete(inv, INFO, [["poll", reads]], error=repr(exc))
            return
        finally:
            consumer.close()
        self.rec.complete(inv, OK, [["poll", reads]])

    def _caught_up(self, consumer: Any) -> bool:
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        for tp in consumer.position(tps):
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=5)
            if high > 0 and tp.offset < high:
                return False
        return True

    # ------------------------------------------------------------------ check

    def role_keys(self) -> dict[str, object]:
        """What aims a role fault at this run: process 0's transactional id, the topic."""
        return {"transactional_id": f"{self.topic}-t0", "topic": self.topic, "partition": 0}

    def teardown(self) -> None:
        """Nothing to stop: the clients are threads of this process, ended with the run."""

    def check(self, history) -> dict:
        allowed = allowed_error_types(subscribe=self.subscribe)
        return compose({"queue": check(history, allowed=allowed)})


class _Clients:
    """One process's clients, rebuilt after an error (a crashed Jepsen process)."""

    def __init__(self, w: QueueWorkload, i: int) -> None:
        self.w, self.i, self.incarnation = w, i, 0
        self._txn = self._idem = self._consumer = None

    def _config(self, **extra: Any) -> dict:
        return _config(self.w.target, {**extra})

    def transactional(self) -> Any:
        if self._txn is None:
            p = Producer(self._config(**{"transactional.id": f"{self.w.topic}-t{self.i}",
                                         "transaction.timeout.ms": 10000, "message.timeout.ms": 8000,
                                         "linger.ms": 2}))
            p.init_transactions(CLIENT_TIMEOUT_S)
            self._txn = p
        return self._txn

    def idempotent(self) -> Any:
        if self._idem is None:
            self._idem = Producer(self._config(**{"enable.idempotence": True, "message.timeout.ms": 8000,
                                                  "linger.ms": 2}))
        return self._idem

    def consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer(self._config(**{
                "group.id": f"{self.w.topic}-g", "enable.auto.commit": False,
                "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000}))
            if not self.w.subscribe:
                parts = range(self.w.partitions)
                inv = self.w.rec.invoke(self.i, "assign", [self.w._key(p) for p in parts])
                self._consumer.assign([TopicPartition(self.w.topic, p) for p in parts])
                self.w.rec.complete(inv, OK)
        return self._consumer

    def rebuild(self) -> None:
        self.close()
        self.incarnation += 1
        self.w.rec.pair(self.i, "crash", None, INFO)

    def close(self) -> None:
        txn, self._txn = self._txn, None
        if txn is not None:
            try:
                txn.abort_transaction(1)
            except Exception:  # noqa: BLE001
                pass
            txn.flush(1)
        if self._idem is not None:
            self._idem.flush(1)
            self._idem = None
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001
                pass
            self._consumer = None
