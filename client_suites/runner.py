"""The generic client-suite runner: one adapter per client library's suite (`ClientSuite`),
built once, run test by test against one target under a deadline, every outcome judged
against the deviation register and turned into a result row of the certification results.

A row is a results row (reports/results.py reads it from ``results/clients-<suite>.jsonl``;
the ``client_suite`` field keeps it out of the KIP matrix and puts it in the report's
"Client libraries" section, reports/client_suites.py). Verdicts use the report's test
vocabulary: pass, fail, skipped (by the client, with its own reason), error (the suite could
not be built). A registered deviation is worded as the conformance plugin words a strict
xfail, so a registered failure reads "fail (registered DEV-xxx)" and a fixed target turns it
into an unexpected pass (reports/verdicts.py deviation_of).
"""

from __future__ import annotations

import abc
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from conformance.target_health import NOT_RUN_PREFIX
from registers.deviations import Deviation, load_deviations
from reports.verdicts import NOT_RUN

ROWS_PREFIX = "clients-"
DEADLINE_REASON = "deadline"


@dataclass(frozen=True)
class SuiteTarget:
    """What a suite needs of a started target."""

    spec: str
    kind: str
    version: str | None
    bootstrap: str
    nodes: int


@dataclass(frozen=True)
class TestOutcome:
    """One test (or subtest) as the client's test framework ended it."""

    __test__ = False  # not a pytest class

    name: str  # the framework's name, e.g. "TestTxnEtl/range"
    outcome: str  # "pass" | "fail" | "skip" | "error" (nothing ran: the build failed) | "not_run" (target down)
    reason: str  # the client's own message: why it skipped or failed ("" on a pass)
    elapsed_s: float
    output_tail: str = ""
    timed_out: bool = False


class SuiteBuildError(RuntimeError):
    """The suite could not be built (toolchain missing, module download or compile failed)."""


class ClientSuite(abc.ABC):
    """One client library's integration suite: how to build it and run one of its tests."""

    name: str  # the suite's name on the command line and in deviation entries ("franz-go")
    version: str

    @abc.abstractmethod
    def build(self) -> Path:
        """The suite's runnable artefact, built once into kipcheck's cache (SuiteBuildError)."""

    @abc.abstractmethod
    def tests(self) -> tuple[str, ...]:
        """The integration tests that need a broker, in run order (top-level names)."""

    @abc.abstractmethod
    def run_test(self, artefact: Path, test: str, target: SuiteTarget, records: int,
                 deadline_s: float) -> list[TestOutcome]:
        """Run one top-level test against `target`; every test and subtest it ended, and any
        still running when the deadline killed it (a fail with reason DEADLINE_REASON)."""


def select(suite: ClientSuite, pattern: str | None) -> list[str]:
    """The suite's tests whose name `pattern` (a regex, re.search) matches; all without one."""
    rx = re.compile(pattern) if pattern else None
    return [t for t in suite.tests() if rx is None or rx.search(t)]


def run_suite(suite: ClientSuite, target: SuiteTarget, tests: Iterable[str], records: int, deadline_s: float,
              deviations: list[Deviation] | None = None,
              down: Callable[[], str | None] = lambda: None) -> Iterator[dict[str, Any]]:
    """Build once, run each test, yield judged rows as they come (a build failure is one
    error row: nothing of the suite ran). After a test that failed, `down()` asks whether the
    target still answers; when it does not (its reason), the tests left are "not_run" rows
    instead of a wall of failures that say nothing of the target."""
    deviations = load_deviations() if deviations is None else deviations
    try:
        artefact = suite.build()
    except SuiteBuildError as exc:
        yield row_for(suite, target, TestOutcome("(build)", "error", str(exc).splitlines()[0], 0.0, str(exc)[-4000:]),
                   deadline_s, time.time(), "error", str(exc).splitlines()[0])
        return
    left = list(tests)
    while left:
        test = left.pop(0)
        started = time.time()
        failed = False
        for outcome in suite.run_test(artefact, test, target, records, deadline_s):
            verdict, reason = judge(suite.name, outcome, target, deviations)
            failed = failed or outcome.outcome in ("fail", "error")
            yield row_for(suite, target, outcome, deadline_s, started, verdict, reason)
        why = down() if failed and left else None
        if why is not None:
            reason = f"{NOT_RUN_PREFIX} ({target.spec} does not answer: {why}); it stopped answering after {test}"
            for name in left:
                yield row_for(suite, target, TestOutcome(name, "not_run", reason, 0.0), deadline_s, time.time(),
                              NOT_RUN, reason)
            return


def judge(suite: str, outcome: TestOutcome, target: SuiteTarget, deviations: list[Deviation]) -> tuple[str, str]:
    """Verdict and reason of one outcome on `target`, registered deviations applied: a
    registered failure stays "fail" (worded as a strict xfail), a registered test that
    passed is an unexpected pass (worded as a strict xpass) unless the entry is flaky."""
    dev = deviation_for(suite, outcome.name, target, deviations)
    if outcome.outcome == "skip":
        return "skipped", f"skipped by {suite}: {outcome.reason}"
    if dev is None:
        return outcome.outcome, outcome.reason
    if outcome.outcome == "fail" and dev.excuses_text(outcome.output_tail or outcome.reason):
        return "fail", f"expected failure (xfail): {dev.reason}"
    if outcome.outcome == "pass" and dev.flaky is None:
        return "fail", f"[XPASS(strict)] {dev.reason}"
    return outcome.outcome, outcome.reason


def deviation_for(suite: str, name: str, target: SuiteTarget, deviations: list[Deviation]) -> Deviation | None:
    """The entry naming this test (`test: SUITE/TestName[/subtest...]`) on this target; an entry
    naming a test also covers its subtests, and one naming the suite alone (`test: SUITE`, with
    the signature of the one failure it excuses) every test: the most specific entry wins."""
    parts = name.split("/")
    for key in [f"{suite}/{'/'.join(parts[:n])}" for n in range(len(parts), 0, -1)] + [suite]:
        for dev in deviations:
            if dev.matches(target.kind, target.version, key, key):
                return dev
    return None


def row_for(suite: ClientSuite, target: SuiteTarget, outcome: TestOutcome, deadline_s: float, started: float,
         verdict: str, reason: str) -> dict[str, Any]:
    return {
        "nodeid": f"{suite.name}/{outcome.name}",
        "test": outcome.name,
        "client_suite": suite.name,
        "client_version": suite.version,
        "target": target.spec,
        "target_kind": target.kind,
        "target_version": target.version,
        "requirements": [],
        "verdict": verdict,
        "reason": reason,
        "duration_s": round(outcome.elapsed_s, 3),
        "timed_out": outcome.timed_out,
        "deadline_s": deadline_s,
        "output_tail": outcome.output_tail,
        "start": round(started, 3),
    }


def rows_path(results_dir: Path, suite: str) -> Path:
    return results_dir / f"{ROWS_PREFIX}{suite}.jsonl"


def append_row(results_dir: Path, row: dict[str, Any]) -> None:
    """One row appended as it is judged: an interrupted run keeps what ran."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(rows_path(results_dir, row["client_suite"]), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")
