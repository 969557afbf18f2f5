"""Result rows: one JSON line per recorded test (results-<worker>.jsonl) with its verdict,
reason, divergences and, when it did not pass, evidence; and the verdict counts of the
terminal summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from targets.target import TargetSpec
from clients.normalize import jsonable

from conformance import deadlines, evidence
from conformance.items import SUITES_PARTS, is_recorded, item_spec, name_without_params, requirement_ids
from conformance.state import (
    DIVERGENCES_KEY, NOT_SUPPORTED_KEY, NOT_SUPPORTED_PREFIX, PHASES_KEY, TARGET_DOWN_KEY, TARGET_RESUMED_KEY,
    KipcheckState, state_of,
)

VERDICTS = ("pass", "fail", "not_supported", "error", "skipped", "not_run")


def _suite_name(item: pytest.Item) -> str:
    path = Path(item.path)
    parts = path.with_suffix("").parts
    for i in range(len(parts) - 1):
        if parts[i : i + 2] == SUITES_PARTS:
            rel = list(parts[i + 2 :])
            break
    else:
        try:
            rel = list(path.with_suffix("").relative_to(item.config.rootpath).parts)
        except ValueError:
            rel = [path.stem]
    if rel and rel[-1].startswith("test_"):
        rel[-1] = rel[-1][len("test_") :]
    return "/".join(rel)


def _reason(rep: pytest.TestReport) -> str | None:
    longrepr = rep.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        msg = str(longrepr[2])
        return msg[len("Skipped: ") :] if msg.startswith("Skipped: ") else msg
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)[:4000]
    text = str(longrepr).strip()
    return text.splitlines()[-1][:4000] if text else None


def _verdict(item: pytest.Item, phases: dict[str, pytest.TestReport]) -> tuple[str, str | None]:
    not_supported = item.stash.get(NOT_SUPPORTED_KEY, None)
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")

    def skipped_verdict(rep: pytest.TestReport) -> tuple[str, str | None]:
        reason = _reason(rep)
        if not_supported is not None or (reason or "").startswith(NOT_SUPPORTED_PREFIX):
            return "not_supported", reason
        return "skipped", reason

    if TARGET_DOWN_KEY in item.stash:
        return "not_run", _reason(setup) if setup is not None else "not run: target down"
    if setup is not None and setup.failed:
        return "error", f"setup: {_reason(setup)}"
    if setup is not None and setup.skipped:
        return skipped_verdict(setup)
    if call is None:
        return "error", "test did not run"
    if hasattr(call, "wasxfail"):
        if call.skipped:
            return "fail", f"expected failure (xfail): {call.wasxfail}".rstrip(": ")
        if call.passed:
            verdict, reason = "pass", None
        else:  # strict xpass
            return "fail", _reason(call)
    elif call.failed:
        return "fail", _reason(call)
    elif call.skipped:
        return skipped_verdict(call)
    else:
        verdict, reason = "pass", None
    if teardown is not None and teardown.failed:
        return "error", f"teardown: {_reason(teardown)}"
    return verdict, reason


def build_row(item: pytest.Item, phases: dict[str, pytest.TestReport]) -> dict[str, Any]:
    state = state_of(item.config)
    verdict, reason = _verdict(item, phases)
    spec = item_spec(item)
    target_version = None
    if spec is not None:
        started = state.pool.started(spec)
        target_version = started.version if started is not None else spec.version
    info = item.stash.get(deadlines.DEADLINE_KEY, None)
    timed_out = bool(info and info["fired"])
    if timed_out:
        verdict = "fail"
        reason = deadlines.TIMEOUT_REASON.format(seconds=info["seconds"])
        if info["fired"] != "call":
            reason += f" (stopped during {info['fired']})"
    row = {
        "nodeid": item.nodeid,
        "test": name_without_params(item),
        "suite": _suite_name(item),
        "target": spec.raw if spec is not None else None,
        "target_kind": spec.kind if spec is not None else None,
        "target_version": target_version,
        "requirements": requirement_ids(item),
        "verdict": verdict,
        "reason": reason,
        "duration_s": round(sum(r.duration for r in phases.values()), 6),
        "divergences": list(item.stash.get(DIVERGENCES_KEY, [])),
    }
    if TARGET_DOWN_KEY in item.stash:
        row["target_down"] = item.stash[TARGET_DOWN_KEY]
    if TARGET_RESUMED_KEY in item.stash:
        row["target_resumed"] = item.stash[TARGET_RESUMED_KEY]
    if timed_out:
        row["timed_out"] = True
        row["deadline_s"] = info["seconds"]
    if verdict not in ("pass", "not_run"):
        row["evidence"] = _evidence(item, phases, spec)
    uuid = _allure_uuid(item)
    if uuid:
        row["allure_uuid"] = uuid
    return row


def _assertion_text(phases: dict[str, pytest.TestReport]) -> str | None:
    for when in ("call", "setup", "teardown"):
        rep = phases.get(when)
        if rep is not None and rep.failed:
            crash = getattr(rep.longrepr, "reprcrash", None)
            return str(crash.message) if crash is not None else str(rep.longrepr)
    return None


def _evidence(item: pytest.Item, phases: dict[str, pytest.TestReport], spec: TargetSpec | None) -> dict[str, Any]:
    state = state_of(item.config)
    target = state.pool.started(spec) if spec is not None else None
    exchanges = evidence.RECORDER.snapshot()
    return evidence.build(_assertion_text(phases), exchanges, list(item.stash.get(DIVERGENCES_KEY, [])), target)


def _allure_uuid(item: pytest.Item) -> str | None:
    """The allure result uuid of this test: the "uuid" field of its allure-results/*-result.json
    (allure-commons names the file itself with a fresh uuid4, so match on the field)."""
    listener = item.config.pluginmanager.get_plugin("allure_listener")
    if listener is None:
        return None
    try:
        uuid = listener._cache.get(item.nodeid)
        return str(uuid) if uuid else None
    except Exception:  # noqa: BLE001
        return None


def _append_row(state: KipcheckState, row: dict[str, Any]) -> None:
    if state.results_dir is None:
        return
    state.results_dir.mkdir(parents=True, exist_ok=True)
    path = state.results_dir / f"results-{state.worker}.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=jsonable, sort_keys=False) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    if not is_recorded(item):
        return rep
    phases = item.stash.setdefault(PHASES_KEY, {})
    phases[rep.when] = rep
    if rep.when == "teardown":
        state = state_of(item.config)
        row = build_row(item, phases)
        _append_row(state, row)
        rep.kipcheck_row = row  # travels to the xdist controller with the report
    return rep


class ReportCounter:
    """Registered per config: counts verdicts from reports (on the xdist controller they
    arrive from the workers with the row attached) for the terminal summary."""

    def __init__(self, state: KipcheckState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = getattr(report, "kipcheck_row", None)
        if report.when != "teardown" or not isinstance(row, dict):
            return
        state = self.state
        state.rows_seen += 1
        verdict = row.get("verdict", "error")
        state.verdicts[verdict] = state.verdicts.get(verdict, 0) + 1
        state.divergences += len(row.get("divergences") or ())
        target, reason = row.get("target"), row.get("reason") or ""
        if target and verdict == "skipped" and reason.startswith(f"testcontainers target {target} skipped"):
            state.skipped_targets[target] = reason
        if target and verdict == "error" and f"target {target} failed to start" in reason:
            state.failed_targets[target] = reason


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = state_of(config)
    if not state.verdicts and not state.skipped_targets and not state.failed_targets:
        return
    tr = terminalreporter
    tr.section("kipcheck")
    counts = ", ".join(f"{state.verdicts.get(v, 0)} {v}" for v in VERDICTS if state.verdicts.get(v))
    tr.write_line(f"targets: {', '.join(s.raw for s in state.specs)}; verdicts: {counts or 'none'}; "
                  f"divergences recorded: {state.divergences}")
    for spec, reason in sorted(state.skipped_targets.items()):
        tr.write_line(f"SKIPPED target {spec}: {reason}")
    for spec, reason in sorted(state.failed_targets.items()):
        tr.write_line(f"FAILED target {spec}: {reason}")
    if state.results_dir is not None:
        tr.write_line(f"results written to {state.results_dir}")
