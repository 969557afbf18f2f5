"""What every injector needs from a target: node addresses, a live bootstrap, a clock."""

from __future__ import annotations

import random
import time
from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.select import pick_nodes


class TargetInjector:
    """Base of the injectors: the target, a seeded RNG for node choice, the open records."""

    kinds: tuple[str, ...] = ()

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.target: Any = None
        self.open: list[FaultRecord] = []

    def prepare(self, target: Any) -> None:
        """Nothing to put in place before start (network faults override this)."""

    def setup(self, target: Any) -> None:
        self.target = target
        self._addresses: dict[int, tuple[str, int]] = {}

    def address(self, node_id: int) -> tuple[str, int]:
        """A node's own address, remembered from before any fault (Metadata drops a down node)."""
        if node_id not in self._addresses:
            self._addresses[node_id] = self.target.node_bind_address(node_id)  # behind any fault proxy
        return self._addresses[node_id]

    def admin_bootstrap(self, avoid: tuple[int, ...] = ()) -> str:
        """Direct addresses of the nodes (first the ones not being faulted)."""
        ids = sorted(self.target.node_ids, key=lambda n: n in avoid)
        return ",".join("%s:%d" % self.address(n) for n in ids)

    def nodes_for(self, spec: FaultSpec) -> tuple[int, ...]:
        return pick_nodes(spec, list(self.target.node_ids), self.rng, self.admin_bootstrap())

    def start_record(self, spec: FaultSpec, nodes: tuple[int, ...]) -> FaultRecord:
        record = FaultRecord(spec, nodes=nodes, started_ns=time.time_ns())
        self.open.append(record)
        return record

    def close_record(self, record: FaultRecord) -> FaultRecord:
        record.healed_ns = time.time_ns()
        if record in self.open:
            self.open.remove(record)
        return record

    def heal_all(self) -> None:
        for record in list(self.open):
            self.heal(record)  # type: ignore[attr-defined]

    def teardown(self) -> None:
        self.heal_all()
