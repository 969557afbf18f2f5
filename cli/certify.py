"""`kipcheck certify` and `kipcheck report`: run the conformance suites under pytest against
the targets, then build the certification report (report.json, report.html) from the
results rows; `report` rebuilds it from the rows of an earlier run. How complete the run
was goes to OUT/results/run.json (conformance/run_status.py); when the run ends, certify
seals the results (OUT/results/seal.json, reports/seal.py: `report` and `verify` refuse rows
that no longer match) and lists what it wrote in OUT (cli/out_manifest.py)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import conformance
from cli import out_manifest
from cli.clients import check_client_suites, run_clients
from cli.common import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, PLUGIN_MODULE, SUITES_PACKAGE, UsageError, err,
                        load_catalog_or_fail, not_utf8, now_iso, parse_specs, plugin_registered)
from conformance import run_status
from conformance.preflight import check_all
from conformance.progress import Progress
from reports import seal
from reports.certification import build_report_from_dir, exit_code, summary_lines, write_json
from reports.client_suites import unexpected
from reports.html_report import write_html


def _check_importable(module: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UsageError(f"cannot import {module}: is kipcheck installed in this Python ({sys.executable})?")


def package_root() -> Path:
    """The directory holding the kipcheck packages that this Python imports."""
    return Path(conformance.__file__).resolve().parent.parent


PYTEST_INI = """\
# Written by `kipcheck certify`: pytest reads this file, never a pytest.ini,
# tox.ini or pyproject.toml found above --out or the current directory.
[pytest]
addopts = --strict-markers
markers =
    requirement(*ids): requirement ids from conformance/catalog this test checks
    target_kinds(*kinds): restrict a test to target kinds
    deadline(seconds): this test's deadline
    slow(rank): long-running test; certify starts it early, a higher rank first
filterwarnings = error::pytest.PytestUnknownMarkWarning
"""


def pytest_command(
    targets: Sequence[str],
    results_dir: Path,
    allure_dir: Path | None,
    suite: Sequence[str] | None,
    workers: str,
    extra: Sequence[str] = (),
    ini: Path | None = None,
    test_timeout: float | None = None,
) -> list[str]:
    """pytest on the installed suites: rootdir, config file and conftest search are pinned
    to kipcheck's own, so nothing around --out or the cwd can change what runs."""
    root = package_root()
    cmd = [sys.executable, "-m", "pytest", "--pyargs", SUITES_PACKAGE, "-p", "no:cacheprovider",
           "--rootdir", str(root), "--confcutdir", str(root)]
    if ini is not None:
        cmd += ["-c", str(ini)]
    if not plugin_registered():
        cmd += ["-p", PLUGIN_MODULE]
    for t in targets:
        cmd += ["--target", t]
    cmd += ["--kipcheck-results", str(results_dir)]
    if allure_dir is not None:
        cmd += ["--alluredir", str(allure_dir)]
    if test_timeout is not None:
        cmd += ["--kipcheck-deadline", f"{test_timeout:g}"]
    cmd += ["-n", str(workers)]
    if str(workers) != "0":
        # short worker queues: tests start in the plugin's order (spread_slow)
        cmd += ["--maxschedchunk", "1"]
    if suite:
        cmd += ["-k", " or ".join(f"({s})" for s in suite)]
    cmd += list(extra)
    return cmd


class _Stop:
    """Why the CLI stopped pytest early: a signal it received, or --time-limit."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.cause: str | None = None
        self.at: str | None = None
        self.count = 0

    def request(self, signal_name: str, cause: str) -> None:
        self.count += 1
        if self.signal is None:
            self.signal, self.cause, self.at = signal_name, cause, now_iso()


STOP_GRACE_S = 60.0


def _run_pytest(cmd: list[str], out: Path, progress: Any, time_limit: float | None, stop: _Stop) -> int:
    """Run pytest in its own process group with stdout in OUT/pytest.log and stderr
    (librdkafka's log lines among it) in OUT/run.log. SIGINT/SIGTERM to the CLI and
    --time-limit become SIGINT to pytest's group (controller and workers), which then
    writes what it can; a second signal, or STOP_GRACE_S without exiting, kills it."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    previous = {}

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        stop.request(name, f"interrupted by {name}")

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            previous[sig] = signal.signal(sig, on_signal)
    t0 = time.monotonic()
    try:
        with open(out / "pytest.log", "w", encoding="utf-8") as log, open(out / "run.log", "w", encoding="utf-8") as err:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=err, env=env, cwd=str(package_root()),
                                    start_new_session=True)
            forwarded_at: float | None = None
            killed = False
            while True:
                try:
                    rc = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                progress.tick()
                if time_limit is not None and stop.signal is None and time.monotonic() - t0 > time_limit:
                    stop.request("SIGINT", f"stopped by --time-limit {time_limit:g} s")
                if stop.signal is not None and forwarded_at is None:
                    forwarded_at = time.monotonic()
                    _signal_group(proc, signal.SIGINT)
                if forwarded_at is not None and not killed and (
                        stop.count > 1 or time.monotonic() - forwarded_at > STOP_GRACE_S):
                    killed = True
                    _signal_group(proc, signal.SIGKILL)
            progress.finish()
            return rc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


# pytest exit codes: 0 ok, 1 tests failed, 2 interrupted, 3 internal error, 4 usage error, 5 no tests.
_PYTEST_TROUBLE = {
    3: "pytest hit an internal error",
    4: "pytest rejected its command line (is the conformance plugin installed?)",
    5: "no conformance test was selected",
}


def _positive(value: float | None, option: str) -> float | None:
    if value is not None and not value > 0:
        raise UsageError(f"{option} must be a positive number of seconds, got {value:g}")
    return value


def _narrowing(suite: Sequence[str] | None, extra: Sequence[str]) -> dict[str, Any]:
    """Scope facts the CLI knows (the plugin adds -k/-m/explicit ids and the counts)."""
    explicit = [a for a in extra if not a.startswith("-") and ("::" in a or a.endswith(".py"))]
    selecting = any(a in ("-k", "-m") or a.startswith(("-k", "-m")) for a in extra)
    return {"narrowed": bool(suite or explicit or selecting), "suite_exprs": list(suite or []),
            **({"explicit_tests": explicit} if explicit else {})}


def _sign_key(path: str | None) -> bytes | None:
    """The vendor's Ed25519 private key (PEM), checked before any test runs."""
    if path is None:
        return None
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --sign-key {path}: {exc.strerror or exc}") from None
    try:
        seal.load_private_key(pem)
    except seal.SealError as exc:
        raise UsageError(f"--sign-key {path}: {exc}") from None
    return pem


def _make_dirs(*dirs: Path) -> None:
    for d in dirs:
        if d.exists() and not d.is_dir():
            raise UsageError(f"{d} is a file, not a directory (choose another --out)")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot prepare output directory {d}: {exc.strerror or exc}") from None


def cmd_certify(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()  # never empty: reports.usage.non_empty_path (cli/main.py)
    sign_key = _sign_key(args.sign_key)
    specs = parse_specs(args.targets or ["reference"])
    workers = str(args.workers)
    if not (workers == "auto" or workers == "logical" or workers.isdigit()):
        raise UsageError(f"-n must be a number or `auto`, got {workers!r}")
    test_timeout = _positive(args.test_timeout, "--test-timeout")
    time_limit = _positive(args.time_limit, "--time-limit")
    extra = list(args.pytest_args or [])
    if extra and extra[0] != "--":
        raise UsageError(f"unexpected argument {extra[0]!r} (extra pytest arguments go after `--`)")
    extra = extra[1:]
    _check_importable(SUITES_PACKAGE)
    check_client_suites(args.clients or [], specs)
    results_dir = out / "results"
    allure_dir = None if args.no_allure else out / "allure-results"
    _make_dirs(out)
    with out_manifest.run_folder(out):
        _make_dirs(results_dir, *([allure_dir] if allure_dir is not None else []))
        ini = out / ".kipcheck-pytest.ini"
        ini.write_text(PYTEST_INI, encoding="utf-8")
        command = ["kipcheck", *getattr(args, "argv", ["certify"])]
        say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
        say(f"kipcheck certify: targets {', '.join(specs)} -> {out}")
        t0 = time.monotonic()
        run = run_status.new_run(command)
        unreachable = check_all(specs)
        if unreachable:
            run = run_status.finalize(results_dir, run, unreachable_targets=unreachable, expected_tests=0,
                                      requested_targets=specs, scope=_narrowing(args.suite, extra),
                                      reasons=[f"target {s} unreachable: {r}" for s, r in unreachable.items()],
                                      finished_at=now_iso(), duration_s=round(time.monotonic() - t0, 3))
            run_status.write(results_dir, run)
            return _finish_certify(run, results_dir, out, args, specs, allure_dir, None, sign_key)

        cmd = pytest_command(specs, results_dir, allure_dir, args.suite, workers, extra, ini, test_timeout)
        stop = _Stop()
        progress = Progress(results_dir, quiet=args.quiet)
        rc = _run_pytest(cmd, out, progress, time_limit, stop)
        stored = run_status.load(results_dir) or run
        stored["command"] = command
        stored["started_at"] = run["started_at"]
        updates: dict[str, Any] = {"scope": _narrowing(args.suite, extra), "finished_at": now_iso(),
                                   "duration_s": round(time.monotonic() - t0, 3), "pytest_command": cmd,
                                   "pytest_exit_code": rc, "workers": workers,
                                   "wall_time_s": round(time.monotonic() - t0, 3), "requested_targets": specs}
        if not stored.get("scope", {}).get("narrowed") and not updates["scope"]["narrowed"]:
            updates["scope"].pop("narrowed")
        if stored.get("expected_tests") is None and progress.expected is not None:
            updates["expected_tests"] = progress.expected
        if stop.signal is not None:
            updates["interrupted"] = {"signal": stop.signal, "at": stop.at}
            stored["reasons"] = [r for r in stored.get("reasons") or [] if not r.startswith("interrupted after")]
            done = len(run_status.read_rows(results_dir))
            expected = stored.get("expected_tests") or updates.get("expected_tests")
            updates["reasons"] = [f"{stop.cause} after {done} of {expected if expected is not None else '?'} tests"]
        elif rc == 3:
            stored["status"] = "internal_error"
            updates["reasons"] = [f"pytest hit an internal error; see {out / 'pytest.log'}"]
        elif rc < 0 or rc > 5:
            updates["worker_crashes"] = [f"pytest died (exit status {rc}); see {out / 'run.log'}"]
        if stored.get("scope", {}).get("narrowed"):
            updates["scope"]["narrowed"] = True
        run = run_status.finalize(results_dir, stored, **updates)
        run_status.write(results_dir, run)
        if stop.signal is None:  # client libraries' own suites (docs/clients.md), before the seal
            run_clients(args.clients or [], specs, results_dir, out / "client-suites", say)
        return _finish_certify(run, results_dir, out, args, specs, allure_dir, rc, sign_key)


def _finish_certify(run: dict[str, Any], results_dir: Path, out: Path, args: argparse.Namespace, specs: list[str],
                    allure_dir: Path | None, rc: int | None, sign_key: bytes | None) -> int:
    seal.write(results_dir, sign_key)  # the rows are final: from here on they can only be read
    report = _build_and_write(results_dir, out, args.format, target_order=specs)
    if allure_dir is not None:
        _allure_environment(allure_dir, report)
    word, line = run_status.outcome(run, report["summary"]["result"])
    if not args.quiet:
        print()
    _print_summary(report, out, args.format, allure_dir, result_line=line)
    code = exit_code(report)
    if unexpected(report["clients"]):
        err(f"client suites: {unexpected(report['clients'])} unexpected result(s); see {out / 'report.html'}#clients")
        code = EXIT_FAILED if code == EXIT_OK else code
    for t in report["targets"]:
        if t.get("start_error"):
            err(f"target {t['spec']} failed to start: {t['start_error']}")
    if word in ("incomplete", "not-run"):
        return EXIT_USAGE
    if rc in _PYTEST_TROUBLE:
        err(f"{_PYTEST_TROUBLE[rc]} (pytest exit code {rc}); see {out / 'pytest.log'}")
        return EXIT_USAGE
    if rc == 2:
        err(f"pytest stopped early (collection errors?); see {out / 'pytest.log'}")
        return EXIT_USAGE
    if rc == 1 and code == EXIT_OK:
        # pytest saw a failure the results rows do not show (e.g. a collection error).
        err(f"pytest reported failures that are not in the results rows; see {out / 'pytest.log'}")
        return EXIT_FAILED
    if report["summary"]["result"] == "no-results":
        err(f"no results were written to {results_dir}; see {out / 'pytest.log'}")
    return code


def _build_and_write(results_dir: Path, out: Path, fmt: str, target_order: list[str] | None = None,
                     catalog: str | None = None, divergences: str | None = None,
                     deviations: str | None = None) -> dict[str, Any]:
    try:
        report = build_report_from_dir(results_dir, catalog, divergences, target_order=target_order,
                                       deviations_path=deviations)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except seal.SealError as exc:
        raise UsageError(f"{results_dir} does not match its seal: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(not_utf8(results_dir)) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        if fmt in ("all", "json"):
            write_json(report, out / "report.json")
        if fmt in ("all", "html"):
            write_html(report, out / "report.html")
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc}") from None
    return report



def _allure_environment(allure_dir: Path, report: dict[str, Any]) -> None:
    """Add environment.properties (targets, versions) for Allure's Environment widget."""
    if not allure_dir.is_dir():
        return
    lines = [f"kipcheck.version={report.get('kipcheck_version')}"]
    for t in report["targets"]:
        key = t["spec"].replace(" ", "_").replace("=", "_").replace(":", "_")
        ff = ",".join(f"{k}={v}" for k, v in sorted((t.get("finalized_features") or {}).items()))
        lines.append(f"target.{key}=kind {t.get('kind')}, version {t.get('version')}, nodes {t.get('nodes')}"
                     + (f", features {ff}" if ff else ""))
    with contextlib.suppress(OSError):
        (allure_dir / "environment.properties").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _print_summary(report: dict[str, Any], out: Path, fmt: str, allure_dir: Path | None = None,
                   result_line: str | None = None) -> None:
    for line in summary_lines(report):
        print(line)
    for p in report.get("problems") or []:
        print(f"warning: {p}")
    print(result_line or f"result: {report['summary']['result'].upper()}")
    if fmt in ("all", "json"):
        print(f"report.json: {out / 'report.json'}")
    if fmt in ("all", "html"):
        print(f"report.html: {out / 'report.html'}")
    if allure_dir is not None:
        print(f"allure-results: {allure_dir}")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------
# report


def cmd_report(args: argparse.Namespace) -> int:
    results_dir = Path(args.results_dir).resolve()
    if not results_dir.is_dir():
        raise UsageError(f"results directory {args.results_dir} does not exist")
    if args.out is not None:
        out = Path(args.out).resolve()
    else:
        out = results_dir.parent if results_dir.name == "results" else results_dir
    load_catalog_or_fail(args.catalog)
    report = _build_and_write(results_dir, out, args.format, catalog=args.catalog, divergences=args.divergences,
                              deviations=args.deviations)
    word, line = run_status.outcome(run_status.load(results_dir), report["summary"]["result"])
    _print_summary(report, out, args.format, result_line=line)
    code = EXIT_USAGE if word in ("incomplete", "not-run") else exit_code(report)
    for t in report["targets"]:
        if t.get("start_error"):
            err(f"target {t['spec']} failed to start: {t['start_error']}")
    if report["summary"]["result"] == "no-results":
        err(f"no result rows in {results_dir}")
    return code
