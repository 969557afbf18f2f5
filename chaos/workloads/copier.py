"""The exactly-once copier under faults (conformance/eos_copier.py, KIP-98 / KIP-447).

A feeder thread appends unique values to input topic A (idempotent sends, process
``feeder``); the copier (a subprocess) copies A to B in transactions that commit its
group's offsets, and is restarted with the same transactional id whenever it exits
(a client error under a fault is a crash: the new incarnation fences the old one and
resumes from the stable committed offsets). ``catch_up`` lets one last incarnation copy
A to its end, then reads A and B from the start at read_committed. Client ``confluent``
speaks transaction protocol v1; ``reference-tv2`` is the reference producer at TV2
(KIP-890).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from checkers.kafka_queue import EXACTLY_ONCE, check, input_identity
from checkers.result import compose
from clients.outcomes import OK, classify
from checkers.history import History
from chaos.nemesis.hijack import hijackers_of
from clients.confluent import quiet_config as _config
from checkers.recorder import Recorder, read_jsonl
from checkers import fencing
from clients import confluent

REPO = Path(__file__).resolve().parents[2]
COPIER_PROCESS = re.compile(r"copier-\d+")
CLIENTS = {"confluent": ("confluent", "auto"), "reference-tv2": ("reference", "2"),
           "reference-tv1": ("reference", "1")}
# None: the copier assign()s its partitions (no membership, default group metadata);
# classic / consumer: it subscribes as a group member and its offsets are fenced by the
# generation or the KIP-848 member epoch (issue 28).
GROUP_PROTOCOLS = (None, "classic", "consumer")


class CopierWorkload:
    name = "copier"

    def __init__(self, seed: int, partitions: int = 3, feed_rate: float = 40.0, max_records: int = 600,
                 client: str = "confluent", workdir: Path | None = None, group_protocol: str | None = None) -> None:
        if client not in CLIENTS:
            raise ValueError(f"copier client must be one of {', '.join(CLIENTS)}, got {client!r}")
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"copier group protocol must be classic, consumer or None, got {group_protocol!r}")
        if group_protocol is not None and CLIENTS[client][0] != "confluent":
            raise ValueError("a copier group protocol needs the confluent client (the reference consumer only assigns)")
        self.group_protocol = group_protocol
        self.seed, self.partitions, self.feed_rate = seed, partitions, feed_rate
        self.max_records, self.client = max_records, client
        tag = f"{seed}-{random.Random(seed).randrange(1 << 30):x}"
        self.input, self.output = f"chaos-copier-a-{tag}", f"chaos-copier-b-{tag}"
        self.group, self.tid = f"chaos-copier-g-{tag}", f"chaos-copier-t-{tag}"
        self.workdir = workdir
        self.incarnations = 0
        self._proc: subprocess.Popen | None = None
        self._proc_lock = threading.Lock()
        self._torn_down = False
        self.target: Any = None
        self.rec: Recorder | None = None
        self._values = itertools.count(1)

    def setup(self, target: Any, recorder: Recorder) -> None:
        self.target, self.rec = target, recorder
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="kipcheck-copier-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.copier_history = self.workdir / "copier-history.jsonl"
        if self.copier_history.exists():  # the copier appends: an old run's ops would join this history
            raise FileExistsError(f"{self.copier_history} holds another run's copier history")
        confluent.create_topic(target, self.input, partitions=self.partitions)
        confluent.create_topic(target, self.output, partitions=self.partitions)

    def ready(self) -> bool:
        """A copier incarnation committed its first transaction (faults before that find no
        EndTxn to hold and no zombie to hijack; a JVM target can take many seconds)."""
        try:
            with self.copier_history.open() as f:
                return any('"type": "ok"' in line and '"f": "txn"' in line for line in f)
        except OSError:
            return False

    # ------------------------------------------------------------------ run

    def run(self, stop: threading.Event) -> None:
        feeder = threading.Thread(target=self._feed, args=(stop,), name="copier-feeder", daemon=True)
        feeder.start()
        try:
            while not stop.is_set() and not self._torn_down:
                self._incarnation(stop, idle_exit_s=3600.0)
        finally:
            feeder.join()

    def _feed(self, stop: threading.Event) -> None:
        """Idempotent sends of unique values to A, one op per record, at ``feed_rate``/s."""
        rng = random.Random(self.seed)
        producer = Producer(_config(self.target, {"enable.idempotence": True,
                                                               "message.timeout.ms": 8000}))
        try:
            for n in range(self.max_records):
                if stop.is_set():
                    break
                p = rng.randrange(self.partitions)
                v = f"v{n}"
                inv = self.rec.invoke("feeder", "send", [["send", f"{self.input}-{p}", v]])
                got: list = []
                producer.produce(self.input, value=v.encode(), partition=p,
                                 on_delivery=lambda err, msg: got.append((err, msg.offset())))
                producer.flush(10)
                if got and got[0][0] is None:
                    self.rec.complete(inv, OK, [["send", f"{self.input}-{p}", [got[0][1], v]]])
                else:
                    out = classify("produce", got[0][0] if got else TimeoutError("undelivered"))
                    self.rec.complete(inv, out.type, error=f"{out.error}: {out.reason}")
                    producer = Producer(_config(self.target, {"enable.idempotence": True,
                                                                           "message.timeout.ms": 8000}))
                stop.wait(1.0 / self.feed_rate)
        finally:
            producer.flush(5)

    def _incarnation(self, stop: threading.Event | None, idle_exit_s: float, timeout_s: float = 120.0) -> int:
        """Run one copier incarnation until it exits (or ``stop``); complete what it left open."""
        self.incarnations += 1
        process = f"copier-{self.incarnations}"
        client, tv = CLIENTS[self.client]
        config = self.target.client_config()
        extra = [f"--config={k}={v}" for k, v in config.items() if k != "bootstrap.servers"]
        cmd = [sys.executable, "-m", "conformance.eos_copier", "--bootstrap", config["bootstrap.servers"],
               "--input", self.input, "--output", self.output, "--group", self.group,
               "--transactional-id", self.tid, "--history", str(self.copier_history), "--process", process,
               "--client", client, "--transaction-version", tv, "--max-batch", "10",
               "--txn-pause-ms", "10", "--idle-exit-s", str(idle_exit_s),
               "--transaction-timeout-ms", "10000", *extra,
               *(["--group-protocol", self.group_protocol] if self.group_protocol else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        with self._proc_lock, (self.workdir / f"{process}.stderr").open("w") as err:
            if self._torn_down:  # the run is being stopped at once: start nothing
                return -1
            proc = self._proc = subprocess.Popen(cmd, cwd=REPO, stdout=err, stderr=err, env=env)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            if (stop is not None and stop.is_set()) or self._torn_down or time.monotonic() > deadline:
                proc.kill()
                break
            time.sleep(0.1)
        rc = proc.wait(30)
        self._close_process(process, "killed at the end of the run" if rc < 0 else f"exit {rc}")
        return rc

    def teardown(self) -> None:
        """Kill a copier incarnation still running and start no other: no child process
        outlives the run, however it ends (a second Ctrl-C unwinds past ``run``'s loop)."""
        with self._proc_lock:
            self._torn_down = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)

    def _close_process(self, process: str, why: str) -> None:
        """A copier that died leaves its txn open: complete it as info, then record the crash."""
        ops = [op for op in read_jsonl(self.copier_history) if op["process"] == process]
        if ops and ops[-1]["type"] == "invoke":
            ops.append({**ops[-1], "time_ns": time.time_ns(), "type": "info", "error": why})
        ops.append({"time_ns": time.time_ns(), "process": process, "type": "invoke", "f": "crash", "value": None})
        ops.append({"time_ns": time.time_ns(), "process": process, "type": "info", "f": "crash",
                    "value": None, "error": why})
        self.rec.extend(ops)

    # ------------------------------------------------------------------ catch-up

    def catch_up(self, timeout_s: float = 120.0) -> None:
        """A last incarnation copies A to its end (exit 0), then A and B are read whole."""
        for _ in range(5):
            if self._incarnation(None, idle_exit_s=1.5, timeout_s=timeout_s) == 0:
                break
        self._final_read(self.input)
        self._final_read(self.output)

    def _final_read(self, topic: str, timeout_s: float = 60.0) -> None:
        c = Consumer(_config(self.target, {"group.id": f"{self.group}-final", "enable.auto.commit": False,
                                                       "isolation.level": "read_committed"}))
        keys = [f"{topic}-{p}" for p in range(self.partitions)]
        self.rec.pair("final", "assign", keys)
        inv = self.rec.invoke("final", "poll", [["poll"]])
        reads: dict[str, list] = {k: [] for k in keys}
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for m in c.consume(num_messages=500, timeout=0.5):
                    if not m.error():
                        reads[f"{topic}-{m.partition()}"].append([m.offset(), m.value().decode()])
                if _caught_up(c, topic, self.partitions):
                    break
        finally:
            c.close()
        self.rec.complete(inv, OK, [["poll", reads]])

    # ------------------------------------------------------------------ check

    def role_keys(self) -> dict[str, object]:
        """What aims a role fault (``kill:txn-coordinator``, ``pause:group-coordinator``,
        ``partition:leader``) at this run: the copier's transactional id, group and input."""
        return {"transactional_id": self.tid, "group": self.group, "topic": self.input, "partition": 0}

    def transactional_ids(self) -> list[str]:
        """What the ``hijack`` fault may initialise behind the copier's back."""
        return [self.tid]

    def check(self, history: History) -> dict:
        """Judged from the history and the seed alone, so that ``kipcheck chaos --analyze``
        re-judges a recorded run exactly as the run did."""
        copiers = sorted({op.process for op in history if COPIER_PROCESS.fullmatch(str(op.process))})
        incarnations = {self.tid: _in_init_order(history, copiers + hijackers_of(history, self.tid))}
        return compose({"attempts": check(history, allowed=EXACTLY_ONCE),
                        "input-identity": check(input_identity(history, self.output), allowed=EXACTLY_ONCE),
                        "fencing": fencing.check(history, incarnations)})


def _in_init_order(history: History, processes: list[str]) -> list[str]:
    """Incarnations (copiers and hijackers) ordered by their first op: each initialised
    its transactional id just before it."""
    first: dict[str, int] = {}
    for op in history:
        first.setdefault(op.process, op.index)
    return sorted(processes, key=lambda p: first.get(p, len(history)))


def _caught_up(consumer: Any, topic: str, partitions: int) -> bool:
    for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=5)
        if high > 0 and tp.offset < high:
            return False
    return True
