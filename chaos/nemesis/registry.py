"""Where the runner finds injectors: ``nemeses_for(target, kinds)``.

One function, so the runner never imports an injector by name: process faults through
the Target's lifecycle, network faults on per-broker Toxiproxy proxies, per-request faults
through the broker's request hook.
"""

from __future__ import annotations

from typing import Any, Iterable

from chaos.nemesis.base import Nemesis
from chaos.nemesis.container import ContainerNemesis
from chaos.nemesis.hijack import HijackNemesis
from chaos.nemesis.network import NetworkNemesis
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.request import RequestNemesis


def _factories(target: Any = None) -> dict[str, Any]:
    """Fault kind -> injector class. On containerized targets the container injector takes
    the kinds it has (its ``partition`` cuts brokers from each other, which no proxy in
    front of the client listeners can)."""
    classes: list[Any] = [ProcessNemesis, NetworkNemesis, RequestNemesis, HijackNemesis]
    if getattr(target, "kind", None) == "testcontainers":
        classes.insert(0, ContainerNemesis)
    out: dict[str, Any] = {}
    for cls in classes:
        for kind in cls.kinds:
            out.setdefault(kind, cls)
    return out


def known_kinds(target: Any = None) -> tuple[str, ...]:
    return tuple(sorted(_factories(target)))


def nemeses_for(target: Any, kinds: Iterable[str], seed: int = 0) -> list[Nemesis]:
    """One injector per factory covering ``kinds`` (ValueError for a kind nobody injects).

    Injectors are returned un-setup; the runner calls ``setup(target)``.
    """
    factories = _factories(target)
    unknown = sorted(set(kinds) - set(factories))
    if unknown:
        raise ValueError(f"no injector for fault kind(s) {', '.join(unknown)}; known: {', '.join(known_kinds(target))}")
    out: dict[Any, Nemesis] = {}
    for kind in kinds:
        cls = factories[kind]
        if cls not in out:
            out[cls] = cls(seed=seed)
    return list(out.values())
