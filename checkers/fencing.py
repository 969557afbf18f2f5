"""Fencing anomalies: a fenced holder that still got an ok. One rule (``rules.fencing``), three callers.

The rule (``fenced_ok``): holders of a transactional id (or of a group's offsets) are
granted in turn; once a newer holder's grant is known, an operation *invoked* later by a
holder it supersedes must not succeed. One invoked before the grant may (its EndTxn can
reach the coordinator first and commit, KIP-98.TXN.005). Callers:

* chaos copier histories: holders are copier incarnations of one transactional id, a
  grant is known at the new incarnation's first ok op (it follows ``init_transactions``;
  a hijacker records its InitProducerId as its op, so an ``info`` one may never have
  fenced anyone);
* traces (``replay/entity_replay.py``, rule TXN.FENCED_SUCCEEDED): holders are (producer
  id, epoch) pairs granted by InitProducerId / EndTxn v5+ (KIP-890);
* KIP-447 (``stale_generation_cases``): holders are a group's generations, carried by
  TxnOffsetCommit (``sendOffsetsToTransaction(offsets, groupMetadata)``).
No I/O here.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping, Sequence

from checkers.history import OK, History
from checkers.result import CheckResult, decide
from rules.fencing import Grant, Use, fenced_ok, rank_supersedes


# ----------------------------------------------------------------------- chaos histories


def fenced_ok_cases(history: History, incarnations: Mapping[str, Sequence[Any]]) -> list[dict]:
    """``incarnations``: transactional id -> its processes, in initialisation order."""
    ops = history.pairs()
    first: dict[Any, int] = {}
    for op in ops:
        if op.type == OK:
            first.setdefault(op.process, op.invoke.index)
    out = []
    for tid, procs in incarnations.items():
        rank = {p: i for i, p in enumerate(procs)}
        steps: list[Grant | Use] = []
        for op in ops:
            if op.process in rank and first.get(op.process) == op.invoke.index:
                steps.append(Grant(op.process, op.invoke.index))
            if op.process in rank and op.f == "txn":
                steps.append(Use(op.process, op.invoke.index, op.type == OK, op.index))
        for use, grant in fenced_ok(_monotone(steps, rank), rank_supersedes(rank)):
            out.append({"type": "fenced-ok", "transactional-id": tid, "process": use.holder,
                        "op": use.ref, "fenced-by": grant.holder, "fenced-at": grant.at})
    return out


def _monotone(steps: list[Grant | Use], rank: Mapping[Hashable, int]) -> list[Grant | Use]:
    """Drop grants of holders older than one already granted (a late first op of an older
    incarnation does not un-fence anyone)."""
    top, out = -1, []
    for s in steps:
        if isinstance(s, Grant):
            if rank[s.holder] <= top:
                continue
            top = rank[s.holder]
        out.append(s)
    return out


def stale_generation_cases(history: History) -> list[dict]:
    """KIP-447: a transaction whose offsets carry a group generation older than one some
    member already committed with (so the coordinator had moved on) must not succeed.

    The newer generation is known once the op carrying it *completed* (any outcome): the
    client reads its group metadata inside the op, possibly after a rebalance that
    happened during it, so the op's invocation proves nothing yet."""
    per_group: dict[str, list[tuple[int, int, int | None, bool, int]]] = {}
    for op in history.pairs():
        if op.f != "txn":
            continue
        for mop in op.value or op.invoke.value or ():
            if mop[0] == "offsets":
                done = None if op.complete is None else op.complete.index
                per_group.setdefault(mop[1], []).append((op.invoke.index, int(mop[2]), done, op.type == OK, op.index))
    out = []
    for group, uses in per_group.items():
        timeline = sorted([(at, Use(gen, at, ok, ref)) for at, gen, _, ok, ref in uses]
                          + [(done, Grant(gen, done)) for _, gen, done, _, _ in uses if done is not None],
                          key=lambda e: e[0])
        steps: list[Grant | Use] = []
        top = None
        for _, step in timeline:
            if isinstance(step, Grant):
                if top is not None and step.holder <= top:
                    continue  # an older generation known later un-fences nobody
                top = step.holder
            steps.append(step)
        rank = {g: g for _, g, _, _, _ in uses}
        for use, grant in fenced_ok(steps, rank_supersedes(rank)):
            out.append({"type": "stale-generation-ok", "group": group, "generation": use.holder,
                        "op": use.ref, "current-generation": grant.holder})
    return out


ANOMALIES: dict[str, Callable[[History, Mapping[str, Sequence[Any]]], list[dict]]] = {
    "fenced-ok": fenced_ok_cases,
    "stale-generation-ok": lambda history, incarnations: stale_generation_cases(history),
}
"""Error type -> function producing exactly the error maps of that type."""


def check(history: History, incarnations: Mapping[str, Sequence[Any]]) -> CheckResult:
    return decide({t: fn(history, incarnations) for t, fn in ANOMALIES.items()}, allowed=(),
                  stats={"transactional-ids": len(incarnations)})
