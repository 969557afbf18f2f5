"""Anomaly checks for Kafka queue / transactional histories (see docs/checkers.md).

Each ``*_cases`` function takes a ``History`` (or an ``Analysis`` already built from
one) and returns a list of error maps, empty when the history shows no such anomaly.
Every error map is JSON-ready and carries ``"type"``; ops are named by history index
(the completion's index, or the invocation's if the op never completed).

The shared index (``analyze``) is built first: who wrote each (key, value), which
values any poll saw, and the per-key *version order* of committed records: polled records
and the acknowledged sends of writers known to have committed (``_committed``). An
indeterminate (info) write may explain an observation but never demands one (Jepsen,
Elle): an acknowledged send of an info transaction may have been aborted, and a
read_committed consumer then rightly never returns it, so it enters the order only once
the history proves its transaction committed. Failed ops contribute nothing: they
definitely did not happen.

``check`` runs them all and decides validity by a policy of allowed error types.
No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from checkers.result import CheckResult, decide
from checkers.history import CLIENT_FS, FAIL, INFO, OK, Completed, History, Key, Send

# --------------------------------------------------------------------------- shared index


def _sorted(xs: Iterable[Any]) -> list:
    xs = list(xs)
    try:
        return sorted(xs)
    except TypeError:
        return sorted(xs, key=repr)


@dataclass
class VersionOrder:
    """What the history says about one key's log.

    ``values_at`` holds every placement the history observed (polled records and every
    acknowledged send of an ok or info op: a log holds one record per offset whatever
    its transaction's fate). ``offsets_of``, ``offsets`` and ``index_of`` hold committed
    entries only: ``offsets`` in log order, ``index_of`` each one's dense position (gaps
    from aborted or undecided records and transaction markers are never demanded, so
    they do not count as missing entries).
    """

    values_at: dict[int, set] = field(default_factory=dict)
    offsets_of: dict[Any, set[int]] = field(default_factory=dict)
    offsets: list[int] = field(default_factory=list)
    index_of: dict[int, int] = field(default_factory=dict)

    def observe(self, offset: int, value: Any, committed: bool) -> None:
        self.values_at.setdefault(offset, set()).add(value)
        if committed:
            self.offsets_of.setdefault(value, set()).add(offset)

    def seal(self) -> None:
        self.offsets = sorted({o for offs in self.offsets_of.values() for o in offs})
        self.index_of = {o: i for i, o in enumerate(self.offsets)}


@dataclass
class Analysis:
    history: History
    ops: list[Completed]
    writer_of: dict[tuple[Key, Any], Completed]
    version_orders: dict[Key, VersionOrder]
    seen: dict[Key, set]
    """Values of each key observed by at least one ok/info poll."""
    max_read_index: dict[Key, int]
    """Highest version-order index any ok/info poll observed, per key."""

    @property
    def has_reads(self) -> bool:
        return any(self.seen.values())


def analyze(history: History) -> Analysis:
    """Build the shared index every anomaly function reads."""
    ops = history.pairs()
    writer_of: dict[tuple[Key, Any], Completed] = {}
    seen: dict[Key, set] = {}
    for op in ops:
        for s in op.sends():
            writer_of.setdefault((s.key, s.value), op)
        for r in op.reads():
            seen.setdefault(r.key, set()).add(r.value)
    orders: dict[Key, VersionOrder] = {}
    for op in ops:
        if op.type == FAIL:
            continue
        for s in op.sends():
            if s.offset is not None:
                committed = _committed(seen, op, s) is not None
                orders.setdefault(s.key, VersionOrder()).observe(s.offset, s.value, committed)
        for r in op.reads():
            orders.setdefault(r.key, VersionOrder()).observe(r.offset, r.value, True)
    for vo in orders.values():
        vo.seal()
    max_read: dict[Key, int] = {}
    for op in ops:
        for r in op.reads():
            i = orders[r.key].index_of[r.offset]
            if i > max_read.get(r.key, -1):
                max_read[r.key] = i
    return Analysis(history, ops, writer_of, orders, seen, max_read)


def _committed(seen: dict[Key, set], op: Completed, send: Send) -> str | None:
    """Why ``send`` must have committed (read_committed consumers must return it), or None
    if the history cannot tell.

    ok: acknowledged. Polled: someone read it. info plain ``send`` with an offset: the
    broker acknowledged a record no transaction can abort. info ``txn``: another of its
    writes was polled, and a transaction commits all of its writes or none.
    """
    if op.type == OK:
        return "ok"
    if op.type != INFO:
        return None
    if send.value in seen.get(send.key, ()):
        return "info, read"
    if op.f == "send" and send.offset is not None:
        return "info, acknowledged outside a transaction"
    if op.f == "txn" and any(s.value in seen.get(s.key, ()) for s in op.sends()):
        return "info, another write of the txn was read"
    return None


def _analysis(h: History | Analysis) -> Analysis:
    return h if isinstance(h, Analysis) else analyze(h)


def _reader_ops(a: Analysis) -> Iterable[Completed]:
    return (op for op in a.ops if op.f in CLIENT_FS and op.type in (OK, INFO))


# --------------------------------------------------------------------------- log shape


def inconsistent_offsets_cases(h: History | Analysis) -> list[dict]:
    """One offset of a key observed holding more than one value."""
    a = _analysis(h)
    return [{"type": "inconsistent-offsets", "key": k, "offset": o, "values": _sorted(vs)}
            for k, vo in sorted(a.version_orders.items())
            for o, vs in sorted(vo.values_at.items()) if len(vs) > 1]


def duplicate_cases(h: History | Analysis) -> list[dict]:
    """One value of a key observed at more than one offset (values are unique per send)."""
    a = _analysis(h)
    out = []
    for k, vo in sorted(a.version_orders.items()):
        for v in _sorted(vo.offsets_of):
            offs = vo.offsets_of[v]
            if len(offs) > 1:
                out.append({"type": "duplicate", "key": k, "value": v, "offsets": sorted(offs)})
    return out


# --------------------------------------------------------------------------- lost / unseen


def _unseen_writes(a: Analysis) -> Iterable[tuple[Completed, Any, str, dict]]:
    """Committed writes that no poll ever observed, with where they must sit."""
    for (k, v), op in a.writer_of.items():
        if v in a.seen.get(k, ()):
            continue
        sends = op.sends()
        me = next(s for s in sends if s.key == k and s.value == v)
        why = _committed(a.seen, op, me)
        if why is None:
            continue
        vo = a.version_orders.get(k)
        place: dict = {"offset": None, "index": None, "before-index": None}
        if vo is not None:
            offs = vo.offsets_of.get(v)
            if offs:
                place["offset"] = min(offs)
                place["index"] = vo.index_of[min(offs)]
            else:
                # A producer's sends to one key are appended in order, so a later send
                # of the same op to the same key bounds this one from above.
                later = [vo.index_of[min(vo.offsets_of[s.value])] for s in sends
                         if s.key == k and s.position > me.position and vo.offsets_of.get(s.value)]
                if later:
                    place["before-index"] = min(later)
        yield op, (k, v), why, place


def lost_write_cases(h: History | Analysis) -> list[dict]:
    """A committed write no poll observed, although polls of its key read past it.

    Committed as ``_committed`` says (an info write only when the history proves it
    landed). "Past it" means some poll of the
    key observed a version-order index above the write's own (known from its send
    offset, or bounded by a later send of the same op to the same key).
    """
    a = _analysis(h)
    out = []
    for op, (k, v), why, place in _unseen_writes(a):
        top = a.max_read_index.get(k)
        if top is None:
            continue
        i, bound = place["index"], place["before-index"]
        if (i is not None and i < top) or (i is None and bound is not None and bound <= top):
            out.append({"type": "lost-write", "key": k, "value": v, "offset": place["offset"],
                        "index": i, "max-read-index": top,
                        "max-read-offset": a.version_orders[k].offsets[top],
                        "writer": op.index, "committed": why})
    return _sorted_errors(out)


def unseen_cases(h: History | Analysis) -> list[dict]:
    """A committed write no poll observed, and nothing proves it lost (indeterminate).

    Usually the run ended before a consumer got there; a final drain phase should make
    this empty. The default policy turns it into validity "unknown", not False.
    """
    a = _analysis(h)
    lost = {(e["key"], e["value"]) for e in lost_write_cases(a)}
    out = [{"type": "unseen", "key": k, "value": v, "offset": place["offset"],
            "writer": op.index, "committed": why}
           for op, (k, v), why, place in _unseen_writes(a) if (k, v) not in lost]
    return _sorted_errors(out)


def _sorted_errors(errs: list[dict]) -> list[dict]:
    return sorted(errs, key=lambda e: (e["key"], repr(e.get("offset")), repr(e["value"])))


# --------------------------------------------------------------------------- isolation


def g1a_cases(h: History | Analysis) -> list[dict]:
    """Aborted read: a poll observed a value whose writing op definitely failed."""
    a = _analysis(h)
    out = []
    for op in _reader_ops(a):
        for r in op.reads():
            w = a.writer_of.get((r.key, r.value))
            if w is not None and w.type == FAIL:
                out.append({"type": "G1a", "key": r.key, "offset": r.offset, "value": r.value,
                            "writer": w.index, "reader": op.index})
    return out


def precommitted_read_cases(h: History | Analysis) -> list[dict]:
    """A poll observed a value before its writing transaction could have committed.

    Two forms the history can prove: ``own-write``, a transaction polled a value it
    sent itself (its commit comes after all of its micro-ops, and read_committed hides
    uncommitted records from every consumer, its own included; a plain ``send`` op has
    no commit to wait for); ``future-read``, the reading op completed before the writing
    op was even invoked.
    """
    a = _analysis(h)
    out = []
    for op in _reader_ops(a):
        own = {(s.key, s.value) for s in op.sends()} if op.f == "txn" else set()
        for r in op.reads():
            if (r.key, r.value) in own:
                out.append({"type": "precommitted-read", "kind": "own-write", "key": r.key,
                            "offset": r.offset, "value": r.value,
                            "writer": op.index, "reader": op.index})
                continue
            w = a.writer_of.get((r.key, r.value))
            if w is not None and w is not op and op.end_index < w.invoke.index:
                out.append({"type": "precommitted-read", "kind": "future-read", "key": r.key,
                            "offset": r.offset, "value": r.value,
                            "writer": w.index, "reader": op.index})
    return out


# --------------------------------------------------------------------------- producer order


def _send_order(a: Analysis) -> tuple[list[dict], list[dict]]:
    external, internal = [], []
    last: dict[tuple[Any, Key], tuple[int, int]] = {}  # (process, key) -> (offset, op index)
    for op in a.ops:
        if op.f not in CLIENT_FS or op.type != OK:
            continue
        mine: dict[Key, int] = {}
        for s in op.sends():
            if s.offset is None:
                continue
            if s.key in mine:
                if s.offset <= mine[s.key]:
                    internal.append({"type": "int-nonmonotonic-send", "key": s.key,
                                     "process": op.process, "op": op.index,
                                     "prev-offset": mine[s.key], "offset": s.offset})
            elif (op.process, s.key) in last:
                prev_off, prev_op = last[(op.process, s.key)]
                if s.offset <= prev_off:
                    external.append({"type": "nonmonotonic-send", "key": s.key,
                                     "process": op.process, "prev-op": prev_op, "op": op.index,
                                     "prev-offset": prev_off, "offset": s.offset})
            mine[s.key] = s.offset
        for k, o in mine.items():
            last[(op.process, k)] = (o, op.index)
    return external, internal


def nonmonotonic_send_cases(h: History | Analysis) -> list[dict]:
    """A process's later op sent to a key at an offset not above its previous send there.

    Only ok ops with known offsets count. A process runs one op at a time, so its later
    op's sends happen after its earlier op's were acknowledged, and a log appends them
    later, whichever producer instance the process used.
    """
    return _send_order(_analysis(h))[0]


def int_nonmonotonic_send_cases(h: History | Analysis) -> list[dict]:
    """Inside one op, a later send to a key got an offset not above an earlier one."""
    return _send_order(_analysis(h))[1]


# --------------------------------------------------------------------------- consumer order


def _poll_order(a: Analysis) -> dict[str, list[dict]]:
    """Walk each process's polls in order and compare consecutive version-order indices.

    The chain of a process restarts (all keys) at assign, subscribe and crash ops and
    after any send/poll/txn op that failed or was indeterminate (the consumer's position
    is unknown then: a client that aborts rewinds or is rebuilt); a seek restarts the
    keys it names (all keys when it names none).
    """
    errs: dict[str, list[dict]] = {t: [] for t in
                                   ("poll-skip", "nonmonotonic-poll",
                                    "int-poll-skip", "int-nonmonotonic-poll")}
    last: dict[Any, dict[Key, tuple[int, int, int]]] = {}  # process -> key -> (idx, off, op)

    def compare(kind: str, k: Key, op: Completed, prev: tuple[int, int, int],
                idx: int, off: int) -> None:
        prev_idx, prev_off, prev_op = prev
        vo = a.version_orders[k]
        base = {"key": k, "process": op.process, "prev-op": prev_op, "op": op.index,
                "prev-offset": prev_off, "offset": off, "prev-index": prev_idx, "index": idx}
        pre = "int-" if kind == "internal" else ""
        if idx <= prev_idx:
            errs[pre + "nonmonotonic-poll"].append({"type": pre + "nonmonotonic-poll", **base})
        elif idx > prev_idx + 1:
            errs[pre + "poll-skip"].append({"type": pre + "poll-skip", **base,
                                            "skipped": vo.offsets[prev_idx + 1:idx]})

    for op in a.ops:
        chain = last.setdefault(op.process, {})
        if op.f == "seek" and op.invoke.value:
            for k in op.invoke.value:
                chain.pop(k, None)
            continue
        if op.f not in CLIENT_FS:
            chain.clear()
            continue
        if op.type != OK:
            chain.clear()
            continue
        mine: dict[Key, tuple[int, int, int]] = {}
        for r in op.reads():
            idx = a.version_orders[r.key].index_of[r.offset]
            if r.key in mine:
                compare("internal", r.key, op, mine[r.key], idx, r.offset)
            elif r.key in chain:
                compare("external", r.key, op, chain[r.key], idx, r.offset)
            mine[r.key] = (idx, r.offset, op.index)
        chain.update(mine)
    return errs


def poll_skip_cases(h: History | Analysis) -> list[dict]:
    """A process's next poll of a key started past the entry after its previous one.

    "Next entry" is by version order, so offsets never observed (aborted records,
    transaction markers) are not skips; ``skipped`` lists the observed offsets jumped.
    """
    return _poll_order(_analysis(h))["poll-skip"]


def nonmonotonic_poll_cases(h: History | Analysis) -> list[dict]:
    """A process's next poll of a key started at or before its previous poll's last entry."""
    return _poll_order(_analysis(h))["nonmonotonic-poll"]


def int_poll_skip_cases(h: History | Analysis) -> list[dict]:
    """Inside one op, consecutive records of a key skip an observed entry."""
    return _poll_order(_analysis(h))["int-poll-skip"]


def int_nonmonotonic_poll_cases(h: History | Analysis) -> list[dict]:
    """Inside one op, a record of a key is at or before the previous record of that key."""
    return _poll_order(_analysis(h))["int-nonmonotonic-poll"]


# --------------------------------------------------------------------------- policy


ANOMALIES: dict[str, Callable[[History | Analysis], list[dict]]] = {
    "inconsistent-offsets": inconsistent_offsets_cases,
    "duplicate": duplicate_cases,
    "lost-write": lost_write_cases,
    "unseen": unseen_cases,
    "G1a": g1a_cases,
    "precommitted-read": precommitted_read_cases,
    "nonmonotonic-send": nonmonotonic_send_cases,
    "int-nonmonotonic-send": int_nonmonotonic_send_cases,
    "nonmonotonic-poll": nonmonotonic_poll_cases,
    "int-nonmonotonic-poll": int_nonmonotonic_poll_cases,
    "poll-skip": poll_skip_cases,
    "int-poll-skip": int_poll_skip_cases,
}
"""Error type -> function producing exactly the error maps of that type."""

EXACTLY_ONCE: frozenset[str] = frozenset()
"""Default policy (transactional, idempotent, assign-based consumers): nothing allowed."""

INDETERMINATE: frozenset[str] = frozenset({"unseen"})
"""Types that make a result "unknown" rather than False unless allowed."""


def allowed_error_types(*, subscribe: bool = False, idempotent: bool = True,
                        transactional: bool = True) -> frozenset[str]:
    """Error types that are normal for a workload configuration.

    ``subscribe``: group rebalances move consumer positions, so skips and rewinds in
    a process's polls are expected. ``idempotent`` False (at-least-once producer with
    retries): retried batches may be written twice and reordered. ``transactional`` is
    accepted for symmetry; it adds nothing (a non-transactional workload simply has no
    failed transactions to read or own writes to see).
    """
    allowed: set[str] = set(EXACTLY_ONCE)
    if subscribe:
        allowed |= {"poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll"}
    if not idempotent:
        allowed |= {"duplicate", "nonmonotonic-send", "int-nonmonotonic-send"}
    del transactional
    return frozenset(allowed)


def check(history: History, allowed: Iterable[str] = EXACTLY_ONCE,
          indeterminate: Iterable[str] = INDETERMINATE, max_examples: int = 3) -> CheckResult:
    """Run every anomaly function and decide validity by policy.

    False if any error type outside ``allowed`` (and outside ``indeterminate``) was
    found; "unknown" if only indeterminate types were found, or the history observed no
    reads at all (nothing could be proven); True otherwise.
    """
    unknown = set(allowed) - set(ANOMALIES)
    if unknown:
        raise ValueError(f"unknown error types in allowed: {sorted(unknown)}")
    a = analyze(history)
    errors = {name: fn(a) for name, fn in ANOMALIES.items()}
    stats = {
        "ops": len(a.ops),
        "ok": sum(op.type == OK for op in a.ops),
        "fail": sum(op.type == FAIL for op in a.ops),
        "info": sum(op.type == INFO for op in a.ops),
        "keys": len(a.version_orders),
        "values-written": len(a.writer_of),
        "values-read": sum(len(v) for v in a.seen.values()),
    }
    return decide(errors, allowed, indeterminate, evidence=a.has_reads,
                  max_examples=max_examples, stats=stats)


__all__ = ["ANOMALIES", "EXACTLY_ONCE", "INDETERMINATE", "Analysis", "VersionOrder",
           "allowed_error_types", "analyze", "check", *[fn.__name__ for fn in ANOMALIES.values()]]


def input_identity(history: History, output: str) -> History:
    """The history of a copier (A -> B, values tagged ``|<attempt>``) by input identity: a copied value loses its ``|<attempt>`` tag and the
    copier's own sends are dropped, so one input record copied twice into B is one value
    at two offsets of B (the checker's ``duplicate``, KIP-98.EOS.001)."""
    prefix = f"{output}-"

    def project(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for m in value:
            if m[0] == "send" and m[1].startswith(prefix):
                continue
            if m[0] == "poll" and len(m) > 1:
                m = ["poll", {k: [[o, str(v).split("|", 1)[0]] for o, v in pairs] if k.startswith(prefix) else pairs
                              for k, pairs in m[1].items()}]
            out.append(m)
        return out

    return History.from_list([{**op.to_dict(), "value": project(op.value) if op.f in ("txn", "poll", "send")
                               else op.value} for op in history]).validate()
