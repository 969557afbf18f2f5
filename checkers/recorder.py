"""A thread-safe history recorder: workload threads and the nemesis append to one history.

Each op is stamped under one lock, so list order is time order. Ops recorded elsewhere
(a copier subprocess's JSON lines) are merged in by time; a stable sort keeps each
process's own order. Invocations left open at the end are completed as ``info``
(Jepsen: an op that never returned may or may not have happened).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from checkers.history import INFO, History


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[dict] = []
        self._open: dict[Any, dict] = {}

    def _append(self, process: Any, type_: str, f: str, value: Any, error: Any) -> dict:
        with self._lock:
            op = {"time_ns": time.time_ns(), "process": process, "type": type_, "f": f, "value": value}
            if error is not None:
                op["error"] = error
            self._ops.append(op)
            if type_ == "invoke":
                self._open[process] = op
            else:
                self._open.pop(process, None)
            return op

    def invoke(self, process: Any, f: str, value: Any = None) -> dict:
        return self._append(process, "invoke", f, value, None)

    def complete(self, inv: dict, type_: str, value: Any = None, error: Any = None) -> dict:
        """Complete ``inv``; ``value`` None repeats the invocation's value."""
        return self._append(inv["process"], type_, inv["f"], inv["value"] if value is None else value,
                            None if error is None else str(error))

    def pair(self, process: Any, f: str, value: Any = None, type_: str = "ok") -> dict:
        inv = self.invoke(process, f, value)
        return self.complete(inv, type_)

    def extend(self, ops: Iterable[dict]) -> None:
        """Merge ops recorded elsewhere (they carry their own ``time_ns``)."""
        with self._lock:
            self._ops.extend(dict(op) for op in ops)

    def close_open(self, why: str = "never completed") -> None:
        for inv in list(self._open.values()):
            self.complete(inv, INFO, error=why)

    def history(self, cls: type[History] = History) -> History:
        """The recorded ops as ``cls`` (a share-group workload records a ShareHistory)."""
        with self._lock:
            ops = sorted(self._ops, key=lambda op: op["time_ns"])
        return cls.from_list([{**op, "index": i} for i, op in enumerate(ops)]).validate()


def read_jsonl(path: Path) -> list[dict]:
    """JSON lines, skipping a last line cut by a SIGKILL mid-write."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out
