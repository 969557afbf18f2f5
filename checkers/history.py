"""Operation histories for Kafka queue / transactional workloads (pure data).

A history is what a chaos run or the EOS copier records: every client action as an
*invocation* followed (later, possibly with other processes' ops in between) by a
*completion* of the same process. Checkers in ``checkers`` read it offline.

Op shape (JSON object, one per history entry)::

    {"index": 7, "time_ns": 1234, "process": 0,
     "type": "invoke" | "ok" | "fail" | "info",
     "f": "send" | "poll" | "txn" | "assign" | "subscribe" | "seek" | "crash",
     "value": ..., "error": null}

Completion types: ``ok`` = the op definitely happened, ``fail`` = it definitely did
not, ``info`` = indeterminate (timeout, connection lost, crash ...). An invocation
that never completes counts as ``info``.

``value`` of send / poll / txn ops is a list of micro-ops, run in order:

* ``["send", key, value]`` on invocation; completes as ``["send", key, [offset, value]]``
  once the broker acknowledged it (``offset`` may stay unknown: ``["send", key, value]``).
* ``["poll"]`` on invocation; completes as ``["poll", {key: [[offset, value], ...]}]``.

``assign`` / ``subscribe`` carry a list of keys, ``seek`` a ``{key: offset}`` map (or a
list of keys), ``crash`` nothing: they mark points where a process's consumer position
legitimately changes. Keys are topic-partitions, always strings (``"orders-0"``);
builders accept ``("orders", 0)`` tuples and ints and normalise them. Values must be
unique per key across the whole workload (the generator's job) so that every observed
value names exactly one writer, and hashable JSON scalars (ints or strings).

Nothing here does I/O: ``to_json`` / ``from_json`` work on strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
OP_TYPES = (INVOKE, OK, FAIL, INFO)
COMPLETION_TYPES = (OK, FAIL, INFO)

CLIENT_FS = ("send", "poll", "txn")
"""Ops whose value is a list of micro-ops."""
POSITION_FS = ("assign", "subscribe", "seek", "crash")
"""Ops that (may) move a consumer's position: monotonicity chains restart after them."""
NEMESIS_FS = ("start-fault", "stop-fault")
"""Nemesis ops (process ``"nemesis"``, value: the FaultRecord as a dict); checkers skip them."""
FS = CLIENT_FS + POSITION_FS + NEMESIS_FS

Key = str


class HistoryError(ValueError):
    """The history is malformed (bad op shape, unpaired completion, ...)."""


# --------------------------------------------------------------------------- keys


def key_of(key: Any) -> Key:
    """Canonical key: ``("t", 0)`` -> ``"t-0"``, ``3`` -> ``"3"``, strings unchanged."""
    if isinstance(key, str):
        return key
    if isinstance(key, (tuple, list)) and len(key) == 2:
        return f"{key[0]}-{key[1]}"
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise HistoryError(f"not a key (topic-partition): {key!r}")


# --------------------------------------------------------------------------- micro-ops


def _canon_mop(mop: Any) -> list:
    if not isinstance(mop, (list, tuple)) or not mop:
        raise HistoryError(f"micro-op must be a non-empty list: {mop!r}")
    kind = mop[0]
    if kind == "send":
        if len(mop) != 3:
            raise HistoryError(f"send micro-op is [send, key, value]: {mop!r}")
        v = mop[2]
        if isinstance(v, (list, tuple)):
            if len(v) != 2:
                raise HistoryError(f"send result is [offset, value]: {mop!r}")
            v = [v[0], v[1]]
        return ["send", key_of(mop[1]), v]
    if kind == "poll":
        if len(mop) == 1 or mop[1] is None:
            return ["poll"]
        if len(mop) != 2 or not isinstance(mop[1], Mapping):
            raise HistoryError(f"poll micro-op is [poll, {{key: [[offset, value], ...]}}]: {mop!r}")
        reads = {}
        for k, pairs in mop[1].items():
            canon = []
            for pair in pairs:
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise HistoryError(f"poll result entries are [offset, value]: {mop!r}")
                canon.append([pair[0], pair[1]])
            reads[key_of(k)] = canon
        return ["poll", reads]
    if kind == "offsets":
        if len(mop) != 5 or not isinstance(mop[4], Mapping):
            raise HistoryError(f"offsets micro-op is [offsets, group, generation, member, {{key: offset}}]: {mop!r}")
        return ["offsets", mop[1], mop[2], mop[3], {key_of(k): o for k, o in mop[4].items()}]
    raise HistoryError(f"unknown micro-op {kind!r}")


def _canon_value(f: str, value: Any) -> Any:
    if f in CLIENT_FS:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise HistoryError(f"{f} value must be a list of micro-ops: {value!r}")
        return [_canon_mop(m) for m in value]
    if f in ("assign", "subscribe"):
        return None if value is None else [key_of(k) for k in value]
    if f == "seek":
        if value is None:
            return None
        if isinstance(value, Mapping):
            return {key_of(k): o for k, o in value.items()}
        return [key_of(k) for k in value]
    return value  # crash: free-form


def send(key: Any, value: Any, offset: int | None = None) -> list:
    """Send micro-op; with ``offset`` it is the acknowledged (completion) form."""
    return ["send", key_of(key), value if offset is None else [offset, value]]


def offsets(group: str, generation: int, member: str, positions: Mapping[Any, int]) -> list:
    """Offsets micro-op: ``sendOffsetsToTransaction`` with the consumer's group metadata
    (KIP-447: TxnOffsetCommit carries generation and member id)."""
    return ["offsets", group, generation, member, {key_of(k): o for k, o in positions.items()}]


def poll(reads: Mapping[Any, Iterable[Sequence]] | None = None) -> list:
    """Poll micro-op: ``poll()`` for an invocation, ``poll({"k": [(0, "a"), (1, "b")]})``."""
    if reads is None:
        return ["poll"]
    return ["poll", {key_of(k): [[o, v] for o, v in pairs] for k, pairs in reads.items()}]


@dataclass(frozen=True)
class Send:
    key: Key
    value: Any
    offset: int | None
    position: int
    """Index of the micro-op inside its op."""


@dataclass(frozen=True)
class Read:
    key: Key
    offset: int
    value: Any
    position: int


def sends_of(value: Any) -> list[Send]:
    """Every send micro-op of an op value, in order (offset None when unknown)."""
    out = []
    for i, mop in enumerate(value or ()):
        if mop[0] != "send":
            continue
        v = mop[2]
        if isinstance(v, list):
            out.append(Send(mop[1], v[1], v[0], i))
        else:
            out.append(Send(mop[1], v, None, i))
    return out


def reads_of(value: Any) -> list[Read]:
    """Every polled record of an op value, in the order the client saw them."""
    out = []
    for i, mop in enumerate(value or ()):
        if mop[0] != "poll" or len(mop) < 2:
            continue
        for k, pairs in mop[1].items():
            out.extend(Read(k, o, v, i) for o, v in pairs)
    return out


def strip_results(value: Any) -> Any:
    """The invocation form of a micro-op list: no offsets, no poll results."""
    if value is None:
        return None
    out = []
    for mop in value:
        if mop[0] == "send":
            s = sends_of([mop])[0]
            out.append(["send", s.key, s.value])
        elif mop[0] == "offsets":
            out.append(list(mop))
        else:
            out.append(["poll"])
    return out


# --------------------------------------------------------------------------- ops


@dataclass(frozen=True, eq=True)
class Op:
    """One history entry. Subclasses for other workloads (checkers.share_history) set their
    own operation names (`FS`) and value canonicalisation (`canon_value`)."""

    index: int
    time_ns: int
    process: Any
    type: str
    f: str
    value: Any = None
    error: Any = None

    FS: ClassVar[tuple[str, ...]] = FS
    __hash__ = None  # type: ignore[assignment]  # values hold lists

    def __post_init__(self) -> None:
        if self.type not in OP_TYPES:
            raise HistoryError(f"op {self.index}: type must be one of {OP_TYPES}, got {self.type!r}")
        if self.f not in self.FS:
            raise HistoryError(f"op {self.index}: f must be one of {self.FS}, got {self.f!r}")
        try:
            object.__setattr__(self, "value", self.canon_value(self.f, self.type, self.value))
        except HistoryError as exc:
            raise HistoryError(f"op {self.index}: {exc}") from None

    @staticmethod
    def canon_value(f: str, type_: str, value: Any) -> Any:
        return _canon_value(f, value)

    @property
    def is_invoke(self) -> bool:
        return self.type == INVOKE

    def to_dict(self) -> dict:
        d = {"index": self.index, "time_ns": self.time_ns, "process": self.process,
             "type": self.type, "f": self.f, "value": self.value}
        if self.error is not None:
            d["error"] = self.error
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "Op":
        try:
            return cls(index=d["index"], time_ns=d["time_ns"], process=d["process"],
                       type=d["type"], f=d["f"], value=d.get("value"), error=d.get("error"))
        except KeyError as exc:
            raise HistoryError(f"op is missing field {exc}: {dict(d)!r}") from None


@dataclass(frozen=True)
class Completed:
    """An invocation paired with its completion (``complete`` None = never completed)."""

    invoke: Op
    complete: Op | None

    @property
    def type(self) -> str:
        return INFO if self.complete is None else self.complete.type

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def process(self) -> Any:
        return self.invoke.process

    @property
    def index(self) -> int:
        """The op's identity in error maps: its completion index (invocation if none)."""
        return self.invoke.index if self.complete is None else self.complete.index

    @property
    def end_index(self) -> float:
        return float("inf") if self.complete is None else self.complete.index

    @property
    def value(self) -> Any:
        """The completion's value when it has one, else the invocation's."""
        if self.complete is not None and self.complete.value is not None:
            return self.complete.value
        return self.invoke.value

    def sends(self) -> list[Send]:
        return sends_of(self.value) if self.f in CLIENT_FS else []

    def reads(self) -> list[Read]:
        """Observed records; a failed op observed nothing (it definitely did not happen)."""
        if self.f not in CLIENT_FS or self.type == FAIL or self.complete is None:
            return []
        return reads_of(self.complete.value)


@dataclass(frozen=True)
class History:
    ops: tuple[Op, ...] = field(default_factory=tuple)

    op_class: ClassVar[type[Op]] = Op
    completed_class: ClassVar[type[Completed]] = Completed

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, i: int) -> Op:
        return self.ops[i]

    def pairs(self) -> list[Completed]:
        """Invocations paired with their completions, in invocation order.

        A completion belongs to the most recent open invocation of the same process.
        Raises ``HistoryError`` for a completion with no open invocation, a second
        invocation while one is open, or a completion whose ``f`` differs.
        """
        open_: dict[Any, Op] = {}
        done: dict[int, Op | None] = {}
        order: list[Op] = []
        for op in self.ops:
            if op.is_invoke:
                if op.process in open_:
                    raise HistoryError(
                        f"op {op.index}: process {op.process!r} invoked again while op "
                        f"{open_[op.process].index} is still open")
                open_[op.process] = op
                order.append(op)
                done[op.index] = None
            else:
                inv = open_.pop(op.process, None)
                if inv is None:
                    raise HistoryError(f"op {op.index}: completion without an invocation")
                if inv.f != op.f:
                    raise HistoryError(f"op {op.index}: completes f={op.f!r} but op "
                                       f"{inv.index} invoked f={inv.f!r}")
                done[inv.index] = op
        return [self.completed_class(inv, done[inv.index]) for inv in order]

    def validate(self) -> "History":
        """Raise ``HistoryError`` unless indices are 0..n-1 in order and ops pair up."""
        for i, op in enumerate(self.ops):
            if op.index != i:
                raise HistoryError(f"op at position {i} has index {op.index}")
        self.pairs()
        return self

    def to_list(self) -> list[dict]:
        return [op.to_dict() for op in self.ops]

    @classmethod
    def from_list(cls, ops: Iterable[Mapping]) -> "History":
        return cls(tuple(cls.op_class.from_dict(d) for d in ops))


def to_json(history: History, indent: int | None = None) -> str:
    """History as a JSON array of op objects."""
    return json.dumps(history.to_list(), indent=indent, sort_keys=False)


def from_json(text: str) -> History:
    """Inverse of ``to_json``; validates the result."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise HistoryError("a history is a JSON array of ops")
    return History.from_list(data).validate()


# --------------------------------------------------------------------------- builder


class HistoryBuilder:
    """Write small histories readably (tests, examples).

    ``b.ok(0, send("k", 1, offset=0))`` appends an invocation and an ok completion of a
    txn for process 0; the invocation value is derived by stripping results. For
    interleavings use ``h = b.invoke(...)`` then ``b.complete(h, "ok", ...)``.
    Time advances by ``step_ns`` per op.
    """

    def __init__(self, start_ns: int = 0, step_ns: int = 1_000_000) -> None:
        self._ops: list[Op] = []
        self._t = start_ns
        self._step = step_ns

    def _append(self, process: Any, type_: str, f: str, value: Any, error: Any = None) -> Op:
        op = Op(len(self._ops), self._t, process, type_, f, value, error)
        self._ops.append(op)
        self._t += self._step
        return op

    def invoke(self, process: Any, *mops: list, f: str = "txn", value: Any = None) -> Op:
        """Open an op; ``mops`` may be given in completion form, results are stripped.

        Position ops (assign, subscribe, seek, crash) take ``value`` instead of ``mops``.
        """
        if f in CLIENT_FS:
            value = strip_results(list(mops))
        return self._append(process, INVOKE, f, value)

    def complete(self, inv: Op, type_: str, *mops: list, error: Any = None) -> Op:
        """Complete ``inv``; with no ``mops`` the completion repeats the invocation value."""
        value = list(mops) if mops else inv.value
        return self._append(inv.process, type_, inv.f, value, error)

    def _pair(self, process: Any, type_: str, mops: tuple, f: str, error: Any = None) -> Op:
        inv = self.invoke(process, *mops, f=f)
        # fail/info completions report no results, like a real client would
        value = list(mops) if type_ == OK else inv.value
        return self._append(process, type_, f, value, error)

    def ok(self, process: Any, *mops: list, f: str = "txn") -> Op:
        return self._pair(process, OK, mops, f)

    def fail(self, process: Any, *mops: list, f: str = "txn", error: Any = "aborted") -> Op:
        return self._pair(process, FAIL, mops, f, error)

    def info(self, process: Any, *mops: list, f: str = "txn", error: Any = "timeout") -> Op:
        return self._pair(process, INFO, mops, f, error)

    def _position(self, process: Any, f: str, value: Any) -> Op:
        self._append(process, INVOKE, f, value)
        return self._append(process, OK, f, value)

    def assign(self, process: Any, keys: Iterable[Any]) -> Op:
        return self._position(process, "assign", list(keys))

    def subscribe(self, process: Any, keys: Iterable[Any]) -> Op:
        return self._position(process, "subscribe", list(keys))

    def seek(self, process: Any, offsets: Mapping[Any, int]) -> Op:
        return self._position(process, "seek", dict(offsets))

    def crash(self, process: Any) -> Op:
        self._append(process, INVOKE, "crash", None)
        return self._append(process, INFO, "crash", None, "crashed")

    def build(self) -> History:
        return History(tuple(self._ops)).validate()
