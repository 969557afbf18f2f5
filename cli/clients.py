"""`kipcheck clients --suite franz-go[:VERSION] --target SPEC`: run a client library's own
integration suite against a target (client_suites/, docs/clients.md), write its rows to
OUT/results/clients-<suite>.jsonl, seal them and write the report (its "Client libraries"
section). `certify --clients SUITE` runs the same after the conformance suites
(`run_clients`). Exit 0 every test passed, was skipped by the client or failed as
registered; 1 an unregistered failure, an unexpected pass or an error; 2 bad input or a
target that did not start."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Sequence

from cli.common import EXIT_FAILED, EXIT_OK, UsageError, parse_specs
from client_suites.runner import ROWS_PREFIX, ClientSuite, append_row, select
from client_suites.session import TargetStartError, check_spec, run_on_target, start_failure_row
from client_suites.suites import SUITES, UnknownSuite, suite_for
from reports import seal
from reports.certification import build_report_from_dir, write_json
from reports.client_suites import summary_lines as client_summary_lines, unexpected
from reports.html_report import write_html
from reports.usage import non_empty_path, positive_float, positive_int

DEFAULT_OUT = "kipcheck-clients"
# kgo's own default is 500000 records per ETL test (tens of minutes); with 2000 the 35
# integration tests took 4.5 min on reference:nodes=3 and 5.5 min on kafka-native:nodes=3
# (2026-12-05, 2 busy cores; docs/clients.md).
DEFAULT_RECORDS = 2000
DEFAULT_DEADLINE_S = 600.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, metavar="SUITE[:VERSION]",
                   help=f"client suite: {', '.join(sorted(SUITES))} (only the pinned version is built)")
    p.add_argument("--target", "-t", dest="targets", action="append", required=True, metavar="SPEC",
                   help="target spec, repeatable (e.g. reference:nodes=3, kafka-native:nodes=3)")
    p.add_argument("--tests", metavar="REGEX", help="only the suite's tests whose name matches (re.search)")
    p.add_argument("--records", type=positive_int(), default=DEFAULT_RECORDS, metavar="N",
                   help=f"records per ETL test (franz-go: KGO_TEST_RECORDS; default {DEFAULT_RECORDS})")
    p.add_argument("--deadline", type=positive_float(), default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                   help=f"deadline of each top-level test (default {DEFAULT_DEADLINE_S:g})")
    p.add_argument("--out", "-o", default=DEFAULT_OUT, type=non_empty_path, metavar="DIR",
                   help=f"output directory (default: ./{DEFAULT_OUT})")


def resolve(suite_text: str, pattern: str | None, workdir: Path) -> tuple[ClientSuite, list[str]]:
    """The adapter and its selected tests, or UsageError."""
    try:
        suite = suite_for(suite_text, workdir)
    except UnknownSuite as exc:
        raise UsageError(str(exc)) from None
    try:
        tests = select(suite, pattern)
    except re.error as exc:
        raise UsageError(f"bad --tests {pattern!r}: {exc}") from None
    if not tests:
        raise UsageError(f"--tests {pattern!r} selects none of {suite.name}'s tests", f"e.g. {suite.tests()[0]}")
    return suite, tests


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    results_dir = out / "results"
    if (results_dir / seal.SEAL_FILE).exists() or any(results_dir.glob(f"{ROWS_PREFIX}*.jsonl")):
        raise UsageError(f"{out} holds the rows of an earlier run (choose another --out)")
    specs = _client_specs(args.targets)
    suite, tests = resolve(args.suite, args.tests, out / "client-suites")
    print(f"kipcheck clients: {suite.name} {suite.version}, {len(tests)} test(s), {args.records} records, "
          f"targets {', '.join(specs)} -> {out}", flush=True)
    for spec in specs:
        try:
            run_on_target(suite, spec, tests, args.records, args.deadline, results_dir, on_row=_print_row)
        except TargetStartError as exc:
            raise UsageError(str(exc)) from None
    report = _write_report(results_dir, out)
    for line in client_summary_lines(report["clients"]):
        print(line)
    return EXIT_FAILED if unexpected(report["clients"]) else EXIT_OK


def run_clients(names: Sequence[str], specs: Sequence[str], results_dir: Path, workdir: Path,
                say: Any = print) -> None:
    """certify --clients: each suite on each target, rows into the certification results (a
    target that does not start is one error row; the run goes on)."""
    for name in names:
        suite, tests = resolve(name, None, workdir)
        for spec in specs:
            say(f"client suite {suite.name} {suite.version} on {spec} ({len(tests)} tests)")
            try:
                run_on_target(suite, spec, tests, DEFAULT_RECORDS, DEFAULT_DEADLINE_S, results_dir,
                              on_row=lambda row: say(f"  {row['verdict']:8} {row['nodeid']}"))
            except TargetStartError as exc:
                append_row(results_dir, start_failure_row(suite, spec, str(exc), DEFAULT_DEADLINE_S))


def check_client_suites(names: Sequence[str], specs: Sequence[str]) -> None:
    """certify --clients, checked before anything runs (UsageError); nothing without it."""
    if not names:
        return
    for name in names:
        try:
            suite_for(name, Path("."))
        except UnknownSuite as exc:
            raise UsageError(f"--clients: {exc}") from None
    _client_specs(specs)


def _client_specs(specs: Sequence[str]) -> list[str]:
    specs = parse_specs(specs)
    for spec in specs:
        try:
            check_spec(spec)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return specs


def _print_row(row: dict[str, Any]) -> None:
    print(f"  {row['verdict']:8} {row['nodeid']:60} {row['duration_s']:8.2f} s  {row['reason'][:100]}", flush=True)


def _write_report(results_dir: Path, out: Path) -> dict[str, Any]:
    seal.write(results_dir)  # the rows are final: `kipcheck report`/`verify` check them against it
    report = build_report_from_dir(results_dir)
    write_json(report, out / "report.json")
    write_html(report, out / "report.html")
    return report
