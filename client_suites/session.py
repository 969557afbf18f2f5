"""One client suite on one target spec: start the target as certify does (targets.factory),
run the suite's tests against its bootstrap, append the judged rows to a results folder,
stop the target."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

from client_suites.runner import ClientSuite, SuiteTarget, TestOutcome, append_row, row_for, run_suite
from conformance.target_health import probe_target
from targets.factory import create_target
from targets.target import parse_target_spec


class TargetStartError(RuntimeError):
    """The target did not start: nothing of the suite ran on it."""


def check_spec(spec: str) -> None:
    """Client suites speak PLAINTEXT to the target's bootstrap (ValueError otherwise)."""
    if parse_target_spec(spec).option("security"):
        raise ValueError(f"{spec}: client suites run against plaintext targets only (no security=...)")


def run_on_target(suite: ClientSuite, spec: str, tests: Iterable[str], records: int, deadline_s: float,
                  results_dir: Path, on_row: Callable[[dict], None] = lambda row: None) -> None:
    """Write `suite`'s rows on `spec` to `results_dir` as they come; TargetStartError when
    the target does not start."""
    target = create_target(spec)
    try:
        try:
            target.start()
        except Exception as exc:  # noqa: BLE001 - any start failure, said in one line
            raise TargetStartError(f"target {spec} did not start: {str(exc).splitlines()[0] if str(exc) else exc!r}") from exc
        where = SuiteTarget(spec, target.kind, target.version, target.bootstrap_servers, len(target.node_ids))
        for row in run_suite(suite, where, tests, records, deadline_s, down=lambda: probe_target(target)):
            append_row(results_dir, row)
            on_row(row)
    finally:
        target.stop()


def start_failure_row(suite: ClientSuite, spec: str, reason: str, deadline_s: float) -> dict:
    """The one row a suite gets on a target that did not start (certify keeps going)."""
    where = SuiteTarget(spec, parse_target_spec(spec).kind, None, "", 0)
    return row_for(suite, where, TestOutcome("(target)", "error", reason, 0.0), deadline_s, time.time(), "error", reason)
