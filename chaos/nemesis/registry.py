"""Where the runner finds injectors: ``nemeses_for(target, kinds)``.

One function, so the runner never imports an injector by name: process faults through
the Target's lifecycle, network faults on per-broker Toxiproxy proxies, per-request faults
through the broker's request hook.
"""

from __future__ import annotations

from typing import Any, Iterable

from chaos.nemesis.base import Nemesis


def _factories() -> dict[str, Any]:
    from chaos.nemesis.network import NetworkNemesis
    from chaos.nemesis.process import ProcessNemesis
    from chaos.nemesis.request import RequestNemesis
    return {kind: cls for cls in (ProcessNemesis, NetworkNemesis, RequestNemesis) for kind in cls.kinds}


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
