"""Suite power: does the conformance suite catch each seeded reference bug? (issue 14, item 6)

For every bug in reference_impl/model/seeded_bugs.py, one pytest subprocess runs the
conformance tests tagged with any of the bug's catalog ids (``-p conformance.power_select
--requirement-ids ...``) against ``reference:bug=NAME``. The bug is caught when at least one
of them fails (verdict fail or error in the kipcheck result rows); a bug no test catches is a
failure of the suite, exit 1. The differential reference stays the plain ``reference``
(TargetPool.reference_for), so only the broker under test is broken. A bug run that collected
nothing or whose pytest broke before any test ran is "could not run", exit 2: it says nothing
about the suite (issue 24).

  python -m conformance.power [--bugs A,B] [-n 2] [--out power.json] [-k EXPR] [PATHS...]

The JSON table (``power.json``) is what reports/power.py and docs/suite-power.md show.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from reference_impl.model.seeded_bugs import BUGS, BY_NAME, CHAOS_ONLY, SeededBug
from reports.usage import EXIT_USAGE, UsageError, non_negative_int, positive_float, usage_line

# The installed suites, wherever power is run from (a relative path would collect nothing
# outside the checkout).
DEFAULT_PATHS = (str(Path(__file__).resolve().parent / "suites"),)
CAUGHT_VERDICTS = ("fail", "error")
RAN_VERDICTS = ("pass", "fail", "error")
DEFAULT_BUG_TIMEOUT_S = 1800.0
EXIT_MISSED = 1


@dataclass
class BugResult:
    """One row of the power table."""

    name: str
    kip: str
    requirement_ids: list[str]
    description: str
    tests_run: int = 0
    tests_failed: int = 0
    catching_tests: list[str] = field(default_factory=list)
    not_run: int = 0  # skipped / not_supported
    seconds: float = 0.0
    error: str | None = None  # the pytest run itself broke (timeout, usage error)

    @property
    def caught(self) -> bool:
        """A failing test is a catch even when the run was cut short (error says why)."""
        return self.tests_failed > 0

    @property
    def could_not_run(self) -> bool:
        """pytest broke (or collected nothing) and no test even reported: no verdict on the bug."""
        return self.error is not None and not self.tests_run and not self.not_run


def pytest_command(bug: SeededBug, paths: Sequence[str], results_dir: Path, workers: int, keyword: str | None) -> list[str]:
    cmd = [
        sys.executable, "-m", "pytest", *paths,
        "-p", "conformance.power_select", "--requirement-ids", ",".join(bug.requirement_ids),
        "--target", bug.target_spec, "--kipcheck-results", str(results_dir),
        "-q", "-p", "no:cacheprovider", "--no-header", "-rN", "-n", str(workers),
    ]
    if keyword:
        cmd += ["-k", keyword]
    return cmd


def read_rows(results_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(results_dir.glob("results-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def tally(bug: SeededBug, rows: list[dict]) -> BugResult:
    """The table row of one bug from its run's kipcheck result rows."""
    result = BugResult(bug.name, bug.kip, list(bug.requirement_ids), bug.description)
    for row in rows:
        verdict = row.get("verdict")
        if verdict in RAN_VERDICTS:
            result.tests_run += 1
        else:
            result.not_run += 1
        if verdict in CAUGHT_VERDICTS:
            result.tests_failed += 1
            result.catching_tests.append(str(row.get("nodeid")))
    result.catching_tests.sort()
    return result


def run_bug(
    bug: SeededBug, *, paths: Sequence[str] = DEFAULT_PATHS, workers: int = 2, keyword: str | None = None,
    timeout_s: float = DEFAULT_BUG_TIMEOUT_S, cwd: Path | None = None,
) -> BugResult:
    """Run the bug's tagged tests on reference:bug=NAME; never raises for a failing suite."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"kipcheck-power-{bug.name}-") as tmp:
        results = Path(tmp)
        cmd = pytest_command(bug, paths, results, workers, keyword)
        error = None
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy())
            if proc.returncode == 5:
                error = "no test collected (pytest exit 5)"
            elif proc.returncode not in (0, 1):  # 2-4: interrupted, internal or usage errors
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
                error = f"pytest exit {proc.returncode}: {' | '.join(tail)}"
        except subprocess.TimeoutExpired:
            error = f"did not finish within {timeout_s:g} s"
        result = tally(bug, read_rows(results))
    result.error = error
    result.seconds = round(time.monotonic() - t0, 1)
    return result


def table(results: list[BugResult], runtime_s: float) -> dict:
    rows = []
    for r in results:
        row = asdict(r)
        row["caught"] = r.caught
        rows.append(row)
    return {
        "seeded": len(results),
        "caught": sum(r.caught for r in results),
        "missed": [r.name for r in results if not r.caught],
        "runtime_s": round(runtime_s, 1),
        "bugs": rows,
    }


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """Options of `kipcheck power` and `python -m conformance.power`."""
    ap.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS),
                    help="test paths (default: the installed conformance suites)")
    ap.add_argument("--bugs", default=None, help="comma-separated bug names (default: all)")
    ap.add_argument("-n", "--workers", type=non_negative_int(64), default=2,
                    help="pytest-xdist workers per bug run (default 2; 0 runs in one process)")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression applied to every bug run")
    ap.add_argument("--out", default="power.json", help="where to write the JSON table (default power.json)")
    ap.add_argument("--timeout", type=positive_float(), default=DEFAULT_BUG_TIMEOUT_S, help="seconds per bug run")
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="run only every N-th selected bug starting at K (0-based): parallel nightly jobs")


def select_bugs(text: str | None) -> list[SeededBug]:
    """None: every bug the calm suites can catch; else the named ones (`--bugs ''` names none)."""
    if text is None:  # chaos-only bugs are caught by `kipcheck chaos`, not by the calm suites
        return [b for b in BUGS if b.name not in CHAOS_ONLY]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise UsageError(f"unknown seeded bug(s) {', '.join(unknown) or '(none given to --bugs)'}",
                         f"known: {', '.join(sorted(BY_NAME))}; leave --bugs out for all")
    return [BY_NAME[n] for n in names]


def shard_of(bugs: list[SeededBug], text: str | None) -> list[SeededBug]:
    """``K/N``: the bugs at positions K, K+N, K+2N... (N jobs together run each bug once)."""
    if not text:
        return bugs
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 0 <= int(k) < int(n):
        raise UsageError(f"--shard must be K/N with 0 <= K < N, got {text!r}")
    return bugs[int(k)::int(n)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance.power", description=__doc__.splitlines()[0])
    add_arguments(ap)
    try:
        return run(ap.parse_args(argv))
    except UsageError as exc:
        print(usage_line("power", exc.what, exc.hint), file=sys.stderr)
        return EXIT_USAGE


def _check_paths(paths: Sequence[str]) -> None:
    missing = [p for p in paths if not Path(p.split("::")[0]).exists()]
    if missing:
        raise UsageError(f"no such test path {', '.join(missing)}",
                         "give paths relative to the current directory, or none for the installed suites")


def run(args: argparse.Namespace) -> int:
    """The power matrix; exit 0 when every selected bug is caught, 1 when one is missed, 2
    (UsageError) for bad input or when a bug run could not run at all."""
    bugs = shard_of(select_bugs(args.bugs), args.shard)
    _check_paths(args.paths)
    if not args.out.strip():
        raise UsageError("--out needs a file name")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results = []
    for bug in bugs:
        r = run_bug(bug, paths=args.paths, workers=args.workers, keyword=args.keyword, timeout_s=args.timeout)
        results.append(r)
        mark = "caught" if r.caught else "COULD NOT RUN" if r.could_not_run else "MISSED"
        print(f"{bug.name}: {mark} ({r.tests_failed}/{r.tests_run} failed, {r.seconds} s){' ' + r.error if r.error else ''}",
              flush=True)
        Path(args.out).write_text(json.dumps(table(results, time.monotonic() - t0), indent=2) + "\n")
    out = table(results, time.monotonic() - t0)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"suite power: {out['caught']}/{out['seeded']} seeded bugs caught in {out['runtime_s']} s; table: {args.out}")
    broken = [r for r in results if r.could_not_run]
    if broken:
        raise UsageError(f"could not run {len(broken)} of {len(results)} bug runs (no test reported; "
                         f"{broken[0].name}: {broken[0].error})", "see docs/suite-power.md")
    return 0 if not out["missed"] else EXIT_MISSED


if __name__ == "__main__":
    sys.exit(main())
