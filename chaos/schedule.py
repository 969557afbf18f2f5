"""A seeded fault schedule (pure): when each fault starts and heals.

Jepsen's shape: faults come one at a time with a quiet gap between them, rotating through
the requested kinds; the last ``quiet_tail_s`` of the run has none, so clients recover
before the final heal and catch-up reads. The same seed gives the same schedule.
"""

from __future__ import annotations

import dataclasses

import random
from typing import Sequence

from chaos.nemesis.base import ROLES, TARGET_SELECTORS, FaultSpec, FaultWindow


def parse_fault(text: str) -> FaultSpec:
    """``kill`` / ``kill:minority`` / ``kill:txn-coordinator`` -> FaultSpec (ValueError if bad)."""
    kind, _, sel = text.strip().partition(":")
    if not kind or not kind.replace("-", "").isalnum():
        raise ValueError(f"bad fault {text!r}: expected KIND[:SELECTOR]")
    if not sel:
        return FaultSpec(kind)
    if sel in ROLES:
        return FaultSpec(kind, target="role", role=sel)
    if sel in TARGET_SELECTORS and sel != "role":
        return FaultSpec(kind, target=sel)
    raise ValueError(f"bad fault selector {sel!r} in {text!r}: expected one of "
                     f"{', '.join(s for s in TARGET_SELECTORS if s != 'role')} or a role ({', '.join(ROLES)})")


def parse_faults(text: str) -> list[FaultSpec]:
    """A comma-separated list of faults; ``none`` (or empty) is a calm run."""
    names = [n for n in (p.strip() for p in text.split(",")) if n and n != "none"]
    return [parse_fault(n) for n in names]


def schedule(specs: Sequence[FaultSpec], seed: int, time_limit_s: float, *,
             gap_s: tuple[float, float] = (2.0, 5.0), duration_s: tuple[float, float] = (2.0, 6.0),
             quiet_tail_s: float | None = None) -> list[FaultWindow]:
    """Non-overlapping fault windows within ``[0, time_limit_s - quiet_tail_s]``.

    Each window follows a seeded gap and lasts a seeded duration; specs rotate in a
    seeded order, so every requested fault appears once before any repeats.
    """
    if time_limit_s <= 0:
        raise ValueError("time_limit_s must be positive")
    if not specs:
        return []
    rng = random.Random(seed)
    tail = min(time_limit_s / 4, 10.0) if quiet_tail_s is None else quiet_tail_s
    end_by = time_limit_s - tail
    windows: list[FaultWindow] = []
    order: list[FaultSpec] = []
    t = rng.uniform(*gap_s) / 2
    while True:
        if not order:
            order = list(specs)
            rng.shuffle(order)
        dur = rng.uniform(*duration_s)
        if t + dur > end_by:
            break
        windows.append(FaultWindow(order.pop(), round(t, 3), round(t + dur, 3)))
        t += dur + rng.uniform(*gap_s)
    return windows


def aim_roles(windows: list[FaultWindow], keys: dict[str, object]) -> list[FaultWindow]:
    """Role faults take the coordinator keys they lack (transactional id, group, topic,
    partition) from the workload, so ``kill:txn-coordinator`` resolves the coordinator of
    the run's own transactional id; keys given in the spec win."""
    aimed = []
    for w in windows:
        if w.spec.target == "role":
            params = {**keys, **dict(w.spec.params)}
            w = dataclasses.replace(w, spec=dataclasses.replace(w.spec, params=tuple(sorted(params.items()))))
        aimed.append(w)
    return aimed
