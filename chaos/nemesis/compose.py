"""Composition and schedules (Jepsen's ``nemesis/compose`` and a seeded generator).

``ComposedNemesis`` routes each FaultSpec to the injector whose ``kinds`` has it.
``schedule`` is a pure function of its seed: fault windows separated by stable gaps,
every window healed before ``time_limit_s - recovery_s`` so the run ends with a
recovery period (final heal, catch-up reads) before the checkers judge.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from chaos.nemesis.base import FaultRecord, FaultSpec, FaultWindow, Nemesis


class ComposedNemesis:
    def __init__(self, injectors: Sequence[Nemesis]) -> None:
        self.injectors = list(injectors)
        seen: dict[str, Nemesis] = {}
        for inj in self.injectors:
            for kind in inj.kinds:
                if kind in seen:
                    raise ValueError(f"fault kind {kind!r} has two injectors")
                seen[kind] = inj
        self._route = seen
        self.kinds = tuple(seen)
        self._owner: dict[int, Nemesis] = {}

    def injector_for(self, spec: FaultSpec) -> Nemesis:
        try:
            return self._route[spec.kind]
        except KeyError:
            raise ValueError(f"no injector for fault kind {spec.kind!r}; known: {', '.join(self.kinds)}") from None

    def prepare(self, target: Any) -> None:
        for inj in self.injectors:
            inj.prepare(target)

    def setup(self, target: Any) -> None:
        for inj in self.injectors:
            inj.setup(target)

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        inj = self.injector_for(spec)
        record = inj.invoke(spec)
        self._owner[id(record)] = inj
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        inj = self._owner.pop(id(record), None) or self.injector_for(record.spec)
        return inj.heal(record)

    def heal_all(self) -> None:
        for inj in self.injectors:
            inj.heal_all()
        self._owner.clear()

    def teardown(self) -> None:
        errors = []
        for inj in self.injectors:
            try:
                inj.teardown()
            except Exception as exc:  # tear every injector down, then report
                errors.append(exc)
        if errors:
            raise errors[0]


def schedule(
    seed: int,
    specs: Sequence[FaultSpec],
    time_limit_s: float,
    interval_s: float,
    *,
    recovery_s: float | None = None,
    warmup_s: float | None = None,
) -> list[FaultWindow]:
    """Fault windows over a run: after ``warmup_s`` (default ``interval_s``), a fault (the
    specs in rounds, each round in a seeded order) lasts ``interval_s`` (x 0.5-1.5, seeded), then a stable gap of
    ``interval_s``; nothing is faulted after ``time_limit_s - recovery_s`` (default
    max(interval_s, 10 % of the run)). Same arguments, same windows."""
    if not specs:
        return []
    if interval_s <= 0 or time_limit_s <= 0:
        raise ValueError("time_limit_s and interval_s must be positive")
    rng = random.Random(seed)
    recovery = max(interval_s, 0.1 * time_limit_s) if recovery_s is None else recovery_s
    last_heal = time_limit_s - recovery
    t = interval_s if warmup_s is None else warmup_s
    windows: list[FaultWindow] = []
    deck: list[FaultSpec] = []
    while True:
        length = interval_s * rng.uniform(0.5, 1.5)
        if t + length > last_heal:
            break
        if not deck:  # a rotating mix: every spec once per round, in a seeded order
            deck = list(specs)
            rng.shuffle(deck)
        spec = deck.pop()
        windows.append(FaultWindow(spec, round(t, 3), round(t + length, 3)))
        t += length + interval_s
    return windows
