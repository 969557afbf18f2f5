"""Which catalog requirements (registers/catalog/*.yaml) each checker anomaly violates.

One table for every checker (queue, copier, fencing, share group), so an anomaly in
``check.json`` names the KIP sentence it breaks; a test keeps the ids in the catalog.
Liveness types (a committed write never seen) are listed apart: a run that ends before
a reader gets there is not a safety violation.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from checkers import share_group

REQUIREMENTS: dict[str, tuple[str, ...]] = {
    # log shape
    "inconsistent-offsets": ("PROTO.PRODUCE.002",),
    "duplicate": ("KIP-98.IDEMP.006", "KIP-98.EOS.001"),
    # lost / unseen
    "lost-write": ("KIP-98.TXN.001", "KIP-98.TXN.003", "KIP-98.EOS.001"),
    "unseen": ("KIP-98.TXN.003",),
    # isolation
    "G1a": ("KIP-98.TXN.003", "KIP-98.FENCE.004"),
    "precommitted-read": ("KIP-98.LSO.002", "KIP-98.FETCH.003"),
    # producer order
    "nonmonotonic-send": ("KIP-98.IDEMP.003", "PROTO.PRODUCE.002"),
    "int-nonmonotonic-send": ("KIP-98.IDEMP.003", "PROTO.PRODUCE.002"),
    # consumer order
    "nonmonotonic-poll": ("KIP-98.FETCH.003",),
    "int-nonmonotonic-poll": ("KIP-98.FETCH.003",),
    "poll-skip": ("KIP-98.FETCH.003", "KIP-98.TXN.003"),
    "int-poll-skip": ("KIP-98.FETCH.003", "KIP-98.TXN.003"),
    # fencing (checkers.fencing)
    "fenced-ok": ("KIP-98.FENCE.001", "KIP-98.FENCE.002", "KIP-98.FENCE.004"),
    "stale-generation-ok": ("KIP-447.FENCE.002", "KIP-447.FENCE.006"),
}

LIVENESS: frozenset[str] = frozenset({"unseen"})
"""Types that say something never happened yet, not that something wrong happened."""


def requirements_of(error_type: str) -> list[str]:
    """Catalog ids ``error_type`` violates (share-group types come from their checker)."""
    if error_type in REQUIREMENTS:
        return list(REQUIREMENTS[error_type])
    return list(getattr(share_group, "REQUIREMENTS", {}).get(error_type, ()))


def anomalies(result: Mapping, liveness: Iterable[str] = LIVENESS) -> tuple[list[dict], list[dict]]:
    """(safety, liveness) anomaly lists of a composed check result, each entry
    ``{"checker", "type", "count", "requirements", "examples"}``."""
    live = frozenset(liveness)
    safety, later = [], []
    for name, r in result.get("results", {}).items():
        for t, n in sorted(r.get("counts", {}).items()):
            if t in r.get("allowed_error_types", ()):
                continue
            entry = {"checker": name, "type": t, "count": n, "requirements": requirements_of(t),
                     "examples": r.get("examples", {}).get(t, [])}
            (later if t in live else safety).append(entry)
    return safety, later
