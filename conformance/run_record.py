"""What the plugin records about the run as a whole: how many tests were selected (the
progress denominator, conformance/progress.py), worker crashes and a SIGINT, the targets'
descriptions, session.json, and run.json (conformance/run_status.py) on the controller."""

from __future__ import annotations

import datetime
import json
import time
import warnings
from typing import Any

import pytest

from clients.normalize import jsonable

from conformance import run_status
from conformance.items import SUITES_PARTS
from conformance.options import is_xdist_worker
from conformance.progress import write_expected
from conformance.state import KEYBOARD_INTERRUPT, STATE_KEY, KipcheckState, state_of


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        state = items[0].config.stash.get(STATE_KEY, None)
        if state is not None:
            state.deselected += len(items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    state = state_of(session.config)
    state.selected = len(session.items)
    if is_xdist_worker(session.config):
        session.config.workeroutput["kipcheck_scope"] = {"selected": state.selected, "deselected": state.deselected}
    elif state.results_dir is not None:
        write_expected(state.results_dir, state.selected)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the xdist controller: every worker collects the same items."""
    state = node.config.stash.get(STATE_KEY, None)
    if state is not None and state.selected is None:
        state.selected = len(ids)
        if state.results_dir is not None:
            write_expected(state.results_dir, state.selected)


def pytest_testnodedown(node: Any, error: Any) -> None:
    state = node.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if error:
        state.worker_crashes.append(f"{node.gateway.id}: {str(error).strip().splitlines()[-1] if str(error).strip() else 'crashed'}")
    scope = getattr(node, "workeroutput", {}).get("kipcheck_scope")
    if scope and state.deselected == 0:
        state.deselected = int(scope.get("deselected") or 0)


def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    state = sched.config.stash.get(STATE_KEY, None) if hasattr(sched, "config") else None
    if state is not None:
        state.worker_crashes.append(f"a worker crashed running {crashitem}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = state_of(config)
    try:
        if state.results_dir is not None and state.pool.entries():
            state.results_dir.mkdir(parents=True, exist_ok=True)
            payload = {"worker": state.worker, "targets": state.pool.describe_all()}
            (state.results_dir / f"targets-{state.worker}.json").write_text(
                json.dumps(payload, indent=2, default=jsonable), encoding="utf-8"
            )
    finally:
        for problem in state.pool.stop_all():
            warnings.warn(pytest.PytestWarning(f"kipcheck: {problem}"))
    if state.results_dir is not None and not is_xdist_worker(config):
        state.results_dir.mkdir(parents=True, exist_ok=True)
        session_info = {
            "started_at": datetime.datetime.fromtimestamp(state.started_at, datetime.timezone.utc).isoformat(),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "exitstatus": int(exitstatus),
            "targets": [s.raw for s in state.specs],
            "differential": state.differential,
            "catalog": str(state.catalog_dir) if state.catalog_dir else None,
            "args": list(config.invocation_params.args),
            "verdicts": dict(state.verdicts),
            "divergences": state.divergences,
        }
        (state.results_dir / "session.json").write_text(json.dumps(session_info, indent=2), encoding="utf-8")
        _write_run_json(session, state, int(exitstatus))


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    """Tell a SIGINT apart from pytest's other early stops (both exit with status 2);
    collection errors raise Session.Interrupted, a KeyboardInterrupt subclass."""
    if not isinstance(excinfo.value, pytest.Session.Interrupted):
        KEYBOARD_INTERRUPT.append(True)


def _scope(config: pytest.Config, state: KipcheckState) -> dict[str, Any]:
    """Was the selection narrowed (by -k, -m, explicit test ids or paths other than the suites)?"""
    keyword = config.getoption("keyword", "") or None
    markexpr = config.getoption("markexpr", "") or None
    explicit = [a for a in config.args if not _whole_suites(a)]
    selected = state.selected
    return {
        "narrowed": bool(keyword or markexpr or explicit or state.deselected),
        "suite_exprs": [],
        "keyword": keyword,
        "markexpr": markexpr,
        "explicit_tests": explicit,
        "collected": None if selected is None else selected + state.deselected,
        "selected": selected,
        "deselected": state.deselected,
    }


def _whole_suites(arg: str) -> bool:
    arg = str(arg).rstrip("/")
    return arg in (".".join(SUITES_PARTS), "/".join(SUITES_PARTS)) or arg.endswith("/" + "/".join(SUITES_PARTS))


def _write_run_json(session: pytest.Session, state: KipcheckState, exitstatus: int) -> None:
    """run.json (conformance/run_status.py): the controller's view of completeness."""
    run = run_status.load(state.results_dir) or run_status.new_run(["pytest", *session.config.invocation_params.args])
    run["started_at"] = datetime.datetime.fromtimestamp(state.started_at, datetime.timezone.utc).replace(microsecond=0).isoformat()
    reasons: list[str] = []
    updates: dict[str, Any] = {"scope": _scope(session.config, state), "expected_tests": state.selected,
                               "finished_at": run_status.now_iso(),
                               "duration_s": round(time.time() - state.started_at, 3)}
    if exitstatus == pytest.ExitCode.INTERRUPTED and state.keyboard_interrupt and not run.get("interrupted"):
        updates["interrupted"] = {"signal": "SIGINT", "at": run_status.now_iso()}
        reasons.append(f"interrupted after {state.rows_seen} of {state.selected} tests")
    elif exitstatus == pytest.ExitCode.INTERRUPTED:  # collection errors, -x / --maxfail
        if session.testscollected == 0 or state.selected is None or state.rows_seen < state.selected:
            run["status"] = "internal_error"
            reasons.append(f"pytest stopped early ({session.testsfailed} failure(s)/collection error(s)); see pytest.log")
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
        run["status"] = "internal_error"
        reasons.append("pytest hit an internal error")
    if state.worker_crashes:
        updates["worker_crashes"] = state.worker_crashes
        reasons.extend(state.worker_crashes)
    if state.failed_targets:
        updates["unreachable_targets"] = {s: r.splitlines()[0] for s, r in state.failed_targets.items()}
        reasons.extend(f"target {s} did not start" for s in state.failed_targets)
    updates["reasons"] = reasons
    try:
        run_status.write(state.results_dir, run_status.finalize(state.results_dir, run, **updates))
    except OSError as exc:
        warnings.warn(pytest.PytestWarning(f"kipcheck: cannot write run.json: {exc}"))
