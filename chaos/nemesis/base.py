"""The nemesis contract: what a fault is, how it is applied and healed, how it is recorded.

Jepsen's nemesis split (``jepsen.nemesis``): a *fault spec* is data, a *schedule* is a pure
function of a seed, an *injector* applies and heals faults on one target, and every
nemesis operation goes into the same operation history as the clients' (process
``"nemesis"``). Every applied fault carries an effectiveness verdict: a fault that never
bit (a proxy the clients bypass, a pause of an idle node) makes the run "unknown",
never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

NEMESIS_PROCESS = "nemesis"
"""The history process name of nemesis operations."""

TARGET_SELECTORS = ("one", "minority", "majority", "all", "role")
"""What a fault is aimed at: a node count, or a role resolved at injection time."""

ROLES = ("txn-coordinator", "group-coordinator", "share-coordinator", "leader", "controller")
"""Roles a fault can aim at (``kill:txn-coordinator``); resolved from FindCoordinator /
Metadata when the fault is injected, and the resolved node ids are recorded."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault to inject, as data.

    ``kind`` names the fault (``kill``, ``pause``, ``bounce``, ``partition``, ``latency``,
    ``hold-endtxn``, ``hijack`` ...); ``role`` is set when ``target == "role"``;
    ``params`` holds kind-specific settings (latency ms, held api key, ...).
    """

    kind: str
    target: str = "one"
    role: str | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    @property
    def name(self) -> str:
        """The CLI spelling: ``kill``, ``kill:txn-coordinator``."""
        return f"{self.kind}:{self.role}" if self.role else self.kind


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A scheduled fault: start and heal times in seconds from the run's start."""

    spec: FaultSpec
    start_s: float
    end_s: float


@dataclass
class FaultRecord:
    """What one injection did; one line of ``faults.jsonl``.

    ``nodes`` are the node ids the fault hit (after role resolution), ``effective`` is
    the injector's effectiveness check (None until checked), ``evidence`` says what
    showed it bit or did not (e.g. "producer to node 2 timed out during the cut").
    """

    spec: FaultSpec
    nodes: tuple[int, ...] = ()
    started_ns: int | None = None
    healed_ns: int | None = None
    effective: bool | None = None
    evidence: str = ""
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fault": self.spec.name,
            "kind": self.spec.kind,
            "target": self.spec.target,
            "role": self.spec.role,
            "params": dict(self.spec.params),
            "nodes": list(self.nodes),
            "started_ns": self.started_ns,
            "healed_ns": self.healed_ns,
            "effective": self.effective,
            "evidence": self.evidence,
            "error": self.error,
            "details": self.details,
        }


@runtime_checkable
class Nemesis(Protocol):
    """An injector for some fault kinds on one target (setup / invoke / heal / teardown).

    ``prepare`` runs before the target starts, ``setup`` after; ``invoke`` applies one fault and returns its record (nodes resolved, start time set);
    ``heal`` undoes it and fills ``healed_ns`` and, where it can tell, ``effective``;
    ``heal_all`` is the final heal before the catch-up reads; ``teardown`` releases what
    ``setup`` made (proxies, servers). Injectors raise
    ``targets.target.NotSupportedByTarget`` for a fault the target cannot take.
    """

    kinds: tuple[str, ...]

    def prepare(self, target: Any) -> None:
        """Before the target starts: what must be in place at start (a fault proxy whose
        address each node advertises). Most injectors need nothing here."""

    def setup(self, target: Any) -> None: ...

    def invoke(self, spec: FaultSpec) -> FaultRecord: ...

    def heal(self, record: FaultRecord) -> FaultRecord: ...

    def heal_all(self) -> None: ...

    def teardown(self) -> None: ...
