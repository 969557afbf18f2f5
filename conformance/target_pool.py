"""The targets of one pytest process: started lazily on first use, stopped at session end
or retired earlier by target-affinity scheduling (conformance/scheduling.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from targets.factory import create_target
from targets.target import NotSupportedByTarget, Target, TargetError, TargetSpec, parse_target_spec

from conformance import deadlines
from conformance.options import DEFAULT_TARGET

# kinds whose NotSupportedByTarget at start (no Docker engine, optional package missing)
# skips their tests instead of failing them
SKIPPABLE_KINDS = ("testcontainers",)


def _stop_quietly(target: Target | None) -> None:
    if target is not None:
        try:
            target.stop()
        except Exception:  # noqa: BLE001
            pass


def _capabilities_row(target: Target) -> dict[str, Any]:
    try:
        return target.capabilities().to_dict()
    except Exception as exc:  # noqa: BLE001 - described, never raised
        return {"error": f"{type(exc).__name__}: {exc}"}


def _describe_entry(entry: "_PoolEntry") -> dict[str, Any]:
    row: dict[str, Any] = {"spec": entry.spec.raw, "kind": entry.spec.kind}
    if entry.target is not None:
        try:
            row["describe"] = entry.target.describe()
        except Exception as exc:  # noqa: BLE001
            row["describe"] = {"error": f"{type(exc).__name__}: {exc}"}
        at_start = entry.capabilities_at_start
        row["capabilities"] = at_start if at_start and "error" not in at_start else _capabilities_row(entry.target)
    row["start_error"] = None if entry.error is None else f"{type(entry.error).__name__}: {entry.error}"
    row["skip_reason"] = entry.skip_reason
    return row


@dataclass
class _PoolEntry:
    spec: TargetSpec
    target: Target | None = None
    error: BaseException | None = None
    skip_reason: str | None = None
    started_at: float | None = None
    # As probed right after start, before any test: tests may change a target (the KIP-1289
    # suite finalizes share.version=2 on the reference), and the statement names what the
    # target was certified as, not what one worker's copy ended at.
    capabilities_at_start: dict[str, Any] | None = None


class TargetPool:
    """Targets of one pytest process (one xdist worker): started lazily, once, stopped at
    session end. A start failure is remembered and fails every test that needs it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._entries: dict[str, _PoolEntry] = {}
        self._retired: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()

    def get(self, spec: TargetSpec | str) -> Target:
        if isinstance(spec, str):
            spec = parse_target_spec(spec)
        with self._lock:
            entry = self._entries.get(spec.raw)
            if entry is None:
                with deadlines.paused():  # starting a target is not the test's time
                    entry = self._entries[spec.raw] = self._start(spec)
        if entry.skip_reason is not None:
            pytest.skip(entry.skip_reason)
        if entry.error is not None:
            raise TargetError(f"target {spec.raw} failed to start: {type(entry.error).__name__}: {entry.error}") from entry.error
        assert entry.target is not None
        return entry.target

    def started(self, spec: TargetSpec) -> Target | None:
        entry = self._entries.get(spec.raw)
        return entry.target if entry is not None else None

    def reference_for(self, target: Target) -> Target:
        nodes = len(target.node_ids) if target.spec.nodes > 1 else 1
        return self.get(DEFAULT_TARGET if nodes == 1 else f"{DEFAULT_TARGET}:nodes={nodes}")

    def _start(self, spec: TargetSpec) -> _PoolEntry:
        entry = _PoolEntry(spec, started_at=time.time())
        target: Target | None = None
        try:
            target = self.config.hook.pytest_kipcheck_create_target(spec=spec, config=self.config)
            if target is None:
                target = create_target(spec)
            target.start()
            entry.target = target
            entry.capabilities_at_start = _capabilities_row(target)
        except NotSupportedByTarget as exc:
            if spec.kind in SKIPPABLE_KINDS:
                # testcontainers without a Docker engine (or without the optional extra):
                # an environment limitation, reported as a skip with the reason
                entry.skip_reason = f"{spec.kind} target {spec.raw} skipped: {exc.reason}"
            else:
                entry.error = exc
            _stop_quietly(target)
        except Exception as exc:  # noqa: BLE001 - remembered and raised in every test
            entry.error = exc
            _stop_quietly(target)
        return entry

    def entries(self) -> list[_PoolEntry]:
        return list(self._entries.values())

    def retire(self, spec: TargetSpec) -> None:
        """Stop a running target this process is done with for now (affinity scheduling,
        conformance/scheduling.py); its description is kept for the report, and a later
        test that needs it starts it again. A target that failed to start stays failed."""
        with self._lock:
            entry = self._entries.get(spec.raw)
            if entry is None or entry.target is None:
                return
            self._retired[spec.raw] = _describe_entry(entry)
            del self._entries[spec.raw]
        _stop_quietly(entry.target)

    def describe_all(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._retired)
        out.update((entry.spec.raw, _describe_entry(entry)) for entry in self.entries())
        return out

    def stop_all(self) -> list[str]:
        problems = []
        for entry in self.entries():
            if entry.target is not None:
                try:
                    entry.target.stop()
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"stopping {entry.spec.raw}: {type(exc).__name__}: {exc}")
                entry.target = None
        return problems
