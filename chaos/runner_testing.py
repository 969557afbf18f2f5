"""A minimal process nemesis for the runner: kill a node, restart it at heal.

It stands in until the fault layer's injectors are registered in
``chaos.nemesis.registry``; it implements ``chaos.nemesis.base.Nemesis`` through
``Target.kill_node`` / ``restart_node`` only, so it works on any target that can do those
(reference, kafka-native) and raises NotSupportedByTarget elsewhere. Effectiveness: the
killed node's client port must refuse connections during the fault (a kill that leaves
the port answering never bit).
"""

from __future__ import annotations

import random
import socket
import time
from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from targets.target import NotSupportedByTarget


def _refuses(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """True once a connection to host:port is refused (polled up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                pass
        except OSError:
            return True
        time.sleep(0.1)
    return False


class KillRestartNemesis:
    kinds = ("kill",)

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self.target: Any = None
        self._endpoints: dict[int, tuple[str, int]] = {}
        self._down: dict[int, FaultRecord] = {}

    def prepare(self, target: Any) -> None:
        """Nothing to put in place before start."""

    def setup(self, target: Any) -> None:
        from clients import confluent
        self.target = target
        brokers = confluent.admin(target).list_topics(timeout=15).brokers
        self._endpoints = {b.id: (b.host, b.port) for b in brokers.values()}

    def _nodes(self, spec: FaultSpec) -> tuple[int, ...]:
        ids = sorted(self._endpoints) or list(self.target.node_ids)
        n = {"one": 1, "minority": max(1, (len(ids) - 1) // 2), "majority": len(ids) // 2 + 1,
             "all": len(ids)}.get(spec.target)
        if n is None:
            raise NotSupportedByTarget(f"kill nemesis cannot aim at {spec.name} (roles are not resolved here)")
        return tuple(sorted(self._rng.sample(ids, n)))

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in self.kinds:
            raise ValueError(f"KillRestartNemesis cannot inject {spec.kind!r}")
        nodes = self._nodes(spec)
        rec = FaultRecord(spec, nodes=nodes, started_ns=time.time_ns())
        try:
            for n in nodes:
                self.target.kill_node(n)
                self._down[n] = rec
        except NotSupportedByTarget:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded; the verdict becomes unknown
            rec.error = repr(exc)
            rec.effective = False
            return rec
        refused = [n for n in nodes if n in self._endpoints and _refuses(*self._endpoints[n])]
        rec.effective = len(refused) == len(nodes)
        rec.evidence = (f"node(s) {refused} refused connections after the kill" if rec.effective else
                        f"node(s) {sorted(set(nodes) - set(refused))} still accepted connections after the kill")
        return rec

    def heal(self, record: FaultRecord) -> FaultRecord:
        for n in record.nodes:
            if self._down.pop(n, None) is not None:
                try:
                    self.target.restart_node(n)
                except Exception as exc:  # noqa: BLE001
                    record.error = f"restart of node {n} failed: {exc!r}"
        record.healed_ns = time.time_ns()
        return record

    def heal_all(self) -> None:
        for n, rec in list(self._down.items()):
            self.heal(rec)

    def teardown(self) -> None:
        self.heal_all()
