"""Fencing anomalies (KIP-98 zombie fencing): a fenced instance's transaction that still
committed.

Instances of one transactional id initialise in order; the first op an instance
records comes after its ``init_transactions`` returned, and from then on every older
instance is fenced (KIP-98.FENCE.001). A transaction of an older instance *invoked*
after that point must not complete ``ok``. One invoked earlier may: its EndTxn can
reach the coordinator before the new InitProducerId and commit (KIP-98.TXN.005).
No I/O here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from chaos.checkers.result import CheckResult, decide
from chaos.history import OK, History


def fenced_ok_cases(history: History, incarnations: Mapping[str, Sequence[Any]]) -> list[dict]:
    """``incarnations``: transactional id -> its processes, in initialisation order."""
    ops = history.pairs()
    first: dict[Any, int] = {}
    for op in ops:
        first.setdefault(op.process, op.invoke.index)
    out = []
    for tid, procs in incarnations.items():
        for j, old in enumerate(procs):
            fences = [(first[new], new) for new in procs[j + 1:] if new in first]
            if not fences:
                continue
            fence_at, by = min(fences, key=lambda f: f[0])
            for op in ops:
                if op.process == old and op.f == "txn" and op.type == OK and op.invoke.index > fence_at:
                    out.append({"type": "fenced-ok", "transactional-id": tid, "process": old,
                                "op": op.index, "fenced-by": by, "fenced-at": fence_at})
    return out


def check(history: History, incarnations: Mapping[str, Sequence[Any]]) -> CheckResult:
    return decide({"fenced-ok": fenced_ok_cases(history, incarnations)}, allowed=(),
                  stats={"transactional-ids": len(incarnations)})
