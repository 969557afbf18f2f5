"""Where the runner finds injectors: ``nemeses_for(target, kinds)``.

One function, so the runner never imports an injector by name. Today it knows the
process nemesis of ``chaos.runner_testing`` (kill / restart through the Target); the
fault-layer injectors (Toxiproxy, pause, per-request) are registered here when they land.
"""

from __future__ import annotations

from typing import Any, Iterable

from chaos.nemesis.base import Nemesis


def _factories() -> dict[str, Any]:
    from chaos.runner_testing import KillRestartNemesis
    return {kind: KillRestartNemesis for kind in KillRestartNemesis.kinds}


def known_kinds() -> tuple[str, ...]:
    return tuple(sorted(_factories()))


def nemeses_for(target: Any, kinds: Iterable[str], seed: int = 0) -> list[Nemesis]:
    """One injector per factory covering ``kinds`` (ValueError for a kind nobody injects).

    Injectors are returned un-setup; the runner calls ``setup(target)``.
    """
    factories = _factories()
    unknown = sorted(set(kinds) - set(factories))
    if unknown:
        raise ValueError(f"no injector for fault kind(s) {', '.join(unknown)}; known: {', '.join(known_kinds())}")
    out: dict[Any, Nemesis] = {}
    for kind in kinds:
        cls = factories[kind]
        if cls not in out:
            out[cls] = cls(seed=seed)
    return list(out.values())
