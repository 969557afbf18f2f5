"""The `kipcheck` command line.

    kipcheck certify [--target SPEC]... [--out DIR] [--suite EXPR] [-n WORKERS]
                     [--test-timeout S] [--time-limit S] [-q] [-- PYTEST_ARGS]
    kipcheck report RESULTS_DIR [--out DIR]
    kipcheck catalog [--kip KIP] [--untested] [--results DIR]
    kipcheck broker [--host H] [--port P] [--brokers N]
    kipcheck target up SPEC

Exit codes: 0 success (certify/report: no test failed on any target; a narrowed run
reads PARTIAL SCOPE), 1 a test failed or errored, 2 usage or infrastructure error, an
unreachable target (NOT RUN) or an incomplete run (interrupted, --time-limit, crashed
worker). Bad input: one line `kipcheck: error: ...` on stderr, never a traceback.
certify records how complete the run was in OUT/results/run.json (conformance/run_status.py).
See docs/cli.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_OUT = "kipcheck-report"
SUITES_PACKAGE = "conformance.suites"
PLUGIN_MODULE = "conformance.plugin"


class UsageError(Exception):
    """A bad argument or an infrastructure problem: print the message, exit 2."""


def _err(msg: str) -> None:
    print(f"kipcheck: error: {msg}", file=sys.stderr, flush=True)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _version() -> str:
    from reports.certification import kipcheck_version

    return kipcheck_version()


# ---------------------------------------------------------------------------------
# argument parsing


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"kipcheck: error: {self.prog.removeprefix('kipcheck').strip() + ': ' if self.prog != 'kipcheck' else ''}{message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="kipcheck",
        description="Conformance suite for Kafka transactions (KIP-98/447), share groups (KIP-932) "
        "and KIP-1289: certify a target, run the reference broker, browse the requirement catalog.",
        epilog="Exit codes: 0 ok; 1 a conformance test failed or errored; 2 usage or infrastructure error.",
    )
    p.add_argument("--version", action="version", version=f"kipcheck {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    c = sub.add_parser(
        "certify",
        help="run the conformance suites against targets and write the certification report",
        description="Run the conformance suites (the conformance.suites package) with pytest against "
        "each target, then write OUT/report.json, OUT/report.html and OUT/allure-results/. "
        "Extra pytest arguments may follow `--`.",
    )
    c.add_argument(
        "--target",
        "-t",
        dest="targets",
        action="append",
        metavar="SPEC",
        help="target spec, repeatable: reference[:nodes=N], kafka-native:VERSION[:nodes=N], "
        "librdkafka-mock, kfake, testcontainers:IMAGE, external:HOST:PORT (default: reference)",
    )
    c.add_argument("--out", "-o", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default: ./{DEFAULT_OUT})")
    c.add_argument(
        "--suite",
        "-s",
        action="append",
        metavar="EXPR",
        help="select tests by a pytest -k expression (suite module, test name, keyword); "
        "repeatable, joined with `or` (default: every suite)",
    )
    c.add_argument(
        "-n",
        "--workers",
        # benchmarks --suite certify --workers 4,8 on 2 quiet cores (load 1-2.5): -n 8 took
        # 63.9 s wall / 83 s CPU, -n 4 99.8 s / 73 s. The run waits on broker timers, so more
        # workers shorten it while a worker's start (~4 s CPU, its own broker) stays cheaper.
        default="8",
        metavar="WORKERS",
        help="pytest-xdist workers: a number or `auto` (default: 8; 0 runs in one process)",
    )
    c.add_argument(
        "--format",
        choices=("all", "json", "html"),
        default="all",
        help="report files to write: all (report.json and report.html), json or html (default: all)",
    )
    c.add_argument("--no-allure", action="store_true", help="do not write OUT/allure-results")
    c.add_argument("--quiet", "-q", action="store_true",
                   help="print only the final summary (pytest's output is always in OUT/pytest.log, "
                   "client library logs in OUT/run.log)")
    c.add_argument("--test-timeout", type=float, metavar="SECONDS",
                   help="deadline of every test, overriding its own (default: per test, see docs/cli.md)")
    c.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="stop the run after SECONDS; what ran is reported and the result is INCOMPLETE")
    c.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    r = sub.add_parser(
        "report",
        help="rebuild the report from an existing results directory",
        description="Rebuild report.json and report.html from the results rows of an earlier run.",
    )
    r.add_argument("results_dir", metavar="RESULTS_DIR", help="directory holding *.jsonl result rows (e.g. OUT/results)")
    r.add_argument(
        "--out",
        "-o",
        metavar="DIR",
        help="where to write the report (default: the parent of RESULTS_DIR when it is named `results`, else RESULTS_DIR)",
    )
    r.add_argument("--format", choices=("all", "json", "html"), default="all", help="report files to write (default: all)")
    r.add_argument("--catalog", metavar="DIR", help="requirement catalog directory (default: the packaged catalog)")
    r.add_argument("--divergences", metavar="FILE", help="divergence register (default: the packaged divergences.yaml)")
    r.add_argument("--deviations", metavar="FILE", help="known-deviation register (default: the packaged deviations.yaml)")

    k = sub.add_parser(
        "catalog",
        help="list catalog requirements and their test coverage",
        description="List the requirement catalog. Coverage comes from --results (verdicts per target) "
        "or, without it, from collecting the conformance suites (which tests claim each requirement).",
    )
    k.add_argument("--kip", action="append", metavar="KIP", help="only this KIP (KIP-98, 98, PROTO, ...); repeatable")
    k.add_argument("--untested", action="store_true", help="only requirements that no test covers")
    k.add_argument("--results", metavar="DIR", help="results directory of a run: show per-target verdicts")
    k.add_argument("--no-collect", action="store_true", help="do not collect the suites (no coverage column)")
    k.add_argument("--json", action="store_true", help="print JSON instead of a table")
    k.add_argument("--catalog", metavar="DIR", help="requirement catalog directory (default: the packaged catalog)")

    b = sub.add_parser(
        "broker",
        help="run the reference broker in the foreground",
        description="Run the kipcheck reference broker (N nodes in one process) until SIGINT/SIGTERM. "
        "Prints `bootstrap=HOST:PORT[,...]` as its first line.",
    )
    b.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    b.add_argument("--port", type=int, default=9092, help="port of node 1; node i listens on PORT+i-1; 0 = ephemeral (default: 9092)")
    b.add_argument("--brokers", type=int, default=1, metavar="N", help="number of broker nodes (default: 1)")
    b.add_argument("--advertised-host", metavar="HOST", help="host advertised in Metadata (default: --host)")
    b.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="log level (default: WARNING)")

    t = sub.add_parser("target", help="manage a target cluster", description="Manage a target cluster.")
    tsub = t.add_subparsers(dest="target_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    tu = tsub.add_parser(
        "up",
        help="start a target and keep it running until SIGINT/SIGTERM",
        description="Start the target described by SPEC, print `bootstrap=...` first, and keep it "
        "running until SIGINT/SIGTERM.",
    )
    tu.add_argument("spec", metavar="SPEC", help="target spec, e.g. reference:nodes=3 or kafka-native:4.1.0")

    rec = sub.add_parser(
        "record",
        help="capture proxy: record Kafka traffic to a Parquet trace",
        description="Run a Kafka-protocol-aware proxy in front of UPSTREAM until SIGINT/SIGTERM; every "
        "request/response pair becomes a row of a Parquet trace in --out (see docs/traces.md).",
    )
    rec.add_argument("--upstream", required=True, help="bootstrap host:port[,host:port...] of the real cluster")
    rec.add_argument("--listen", default="127.0.0.1:0", help="host:port of the first proxy listener (0: ephemeral)")
    rec.add_argument("--out", required=True, help="trace directory")
    rec.add_argument("--payloads", choices=("keep", "hash", "drop"), default="keep",
                     help="record keys/values/headers as sent, as SHA-256, or not at all (default: keep)")
    rec.add_argument("--segment-max-bytes", type=int, default=64 << 20)
    rec.add_argument("--segment-max-seconds", type=float, default=60.0)
    rec.add_argument("--advertised-host", default=None, help="host put in rewritten endpoints (default: listen host)")
    rec.add_argument("--writer", choices=("thread", "process"), default="thread",
                     help="write the trace from a thread (default) or a child process (lower added latency)")

    _add_module_command(
        sub, "replay", "replay.replay_cmd",
        help="re-issue a recorded trace against a target, recording the target's answers",
        description="Re-issue the requests of trace DIR against --target in per-connection and causal "
        "order, remapping the ids the target assigns, and write the target's answers as a new trace "
        "(see docs/replay.md). Exit 0 when every request was replayed, 1 when some could not be, 2 on error.",
    )
    _add_module_command(
        sub, "diff", "replay.diff_cmd",
        help="compare two traces field by field (PySpark), with noise cancellation",
        description="Align the exchanges of traces A and B, normalize ids and noise (learned from --noise A2), "
        "and report the response fields that differ (see docs/trace-diff.md). Exit 0 when no divergence, "
        "1 when divergences, 2 on error. Runs unchanged under spark-submit.",
    )
    _add_module_command(
        sub, "check", "replay.check_cmd",
        help="check one trace against the KIP invariants and the reference state machines (PySpark)",
        description="Check trace DIR against the KIP-98 / KIP-447 / KIP-932 invariants and replay the "
        "reference state machines per entity (see docs/trace-checks.md). Exit 0 when no violation, 1 when "
        "violations, 2 on error. Runs unchanged under spark-submit.",
    )
    _add_module_command(sub, "chaos", "chaos.chaos_cmd", help="one seeded chaos run: workload + faults + checkers",
                       description="See docs/chaos-workloads.md. Exit 0 valid, 1 anomaly, 2 could not run, 3 unknown.")
    _add_module_command(sub, "image", "targets.image_cmd", help="build or load the apache/kafka image offline")
    _add_module_command(sub, "power", "conformance.power", help="prove the suite catches every seeded reference bug",
                       description="See docs/suite-power.md. Exit 0 every bug caught, 1 a bug missed, 2 usage error.")
    return p


def _add_module_command(sub: Any, name: str, module: str, **texts: str) -> None:
    """A subcommand whose options (`add_arguments`) and body (`run`) live in `module`
    (replay's record/replay/diff/check, chaos, image, power), imported only when parsing."""
    import importlib

    cmd = sub.add_parser(name, **texts)
    importlib.import_module(module).add_arguments(cmd)
    cmd.set_defaults(command_module=module)


def cmd_module(args: argparse.Namespace) -> int:
    import importlib

    return int(importlib.import_module(args.command_module).run(args))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        args.argv = argv
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code) if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    handler = {
        "certify": cmd_certify,
        "report": cmd_report,
        "catalog": cmd_catalog,
        "broker": cmd_broker,
        "target": cmd_target,
        "record": cmd_record,
        "replay": cmd_module,
        "diff": cmd_module,
        "check": cmd_module,
        "chaos": cmd_module,
        "image": cmd_module,
        "power": cmd_module,
    }[args.command]
    try:
        return handler(args)
    except UsageError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `kipcheck catalog | head`
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")
        return EXIT_OK
    except UnicodeDecodeError as exc:
        _err(f"cannot read {getattr(exc, 'kipcheck_path', 'an input file')}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return EXIT_USAGE
    except OSError as exc:
        _err(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - never a traceback on the console
        if os.environ.get("KIPCHECK_DEBUG"):
            raise
        _err(f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
             "(set KIPCHECK_DEBUG=1 for the traceback)")
        return EXIT_USAGE


# ---------------------------------------------------------------------------------
# certify


def _parse_specs(specs: Sequence[str]) -> list[str]:
    from targets.target import parse_target_spec

    out = []
    for s in specs:
        try:
            parsed = parse_target_spec(s)
        except ValueError as exc:
            raise UsageError(f"bad --target {s!r}: {exc}") from None
        raw = parsed.raw or s
        if raw in out:
            raise UsageError(f"--target {raw!r} given twice")
        out.append(raw)
    return out


def _plugin_registered() -> bool:
    """Is conformance.plugin registered as a pytest11 entry point (installed kipcheck)?"""
    try:
        from importlib.metadata import entry_points

        return any(ep.value.split(":")[0] == PLUGIN_MODULE for ep in entry_points(group="pytest11"))
    except Exception:
        return False


def _check_importable(module: str) -> None:
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UsageError(f"cannot import {module}: is kipcheck installed in this Python ({sys.executable})?")


def package_root() -> Path:
    """The directory holding the kipcheck packages that this Python imports."""
    import conformance

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
    if not _plugin_registered():
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


def _reset_dir(path: Path) -> None:
    """Empty a directory kipcheck owns (OUT/results, OUT/allure-results) before a run."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.mkdir(parents=True)


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
            self.signal, self.cause, self.at = signal_name, cause, _now_iso()


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


def cmd_certify(args: argparse.Namespace) -> int:
    from conformance import run_status
    from conformance.preflight import check_all
    from conformance.progress import Progress

    specs = _parse_specs(args.targets or ["reference"])
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
    out = Path(args.out).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
        results_dir = out / "results"
        allure_dir = None if args.no_allure else out / "allure-results"
        _reset_dir(results_dir)
        if allure_dir is not None:
            _reset_dir(allure_dir)
        ini = out / ".kipcheck-pytest.ini"
        ini.write_text(PYTEST_INI, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot prepare output directory {out}: {exc}") from None

    command = ["kipcheck", *getattr(args, "argv", ["certify"])]
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    say(f"kipcheck certify: targets {', '.join(specs)} -> {out}")
    t0 = time.monotonic()
    run = run_status.new_run(command)
    unreachable = check_all(specs)
    if unreachable:
        run = run_status.finalize(results_dir, run, unreachable_targets=unreachable, expected_tests=0,
                                  scope=_narrowing(args.suite, extra),
                                  reasons=[f"target {s} unreachable: {r}" for s, r in unreachable.items()],
                                  finished_at=_now_iso(), duration_s=round(time.monotonic() - t0, 3))
        run_status.write(results_dir, run)
        return _finish_certify(run, results_dir, out, args, specs, allure_dir, rc=None)

    cmd = pytest_command(specs, results_dir, allure_dir, args.suite, workers, extra, ini, test_timeout)
    stop = _Stop()
    progress = Progress(results_dir, quiet=args.quiet)
    rc = _run_pytest(cmd, out, progress, time_limit, stop)
    stored = run_status.load(results_dir) or run
    stored["command"] = command
    stored["started_at"] = run["started_at"]
    updates: dict[str, Any] = {"scope": _narrowing(args.suite, extra), "finished_at": _now_iso(),
                               "duration_s": round(time.monotonic() - t0, 3), "pytest_command": cmd,
                               "pytest_exit_code": rc, "workers": workers,
                               "wall_time_s": round(time.monotonic() - t0, 3)}
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
    return _finish_certify(run, results_dir, out, args, specs, allure_dir, rc)


def _finish_certify(run: dict[str, Any], results_dir: Path, out: Path, args: argparse.Namespace, specs: list[str],
                    allure_dir: Path | None, rc: int | None) -> int:
    from conformance import run_status
    from reports.certification import exit_code

    report = _build_and_write(results_dir, out, args.format, target_order=specs)
    if allure_dir is not None:
        _allure_environment(allure_dir, report)
    word, line = run_status.outcome(run, report["summary"]["result"])
    if not args.quiet:
        print()
    _print_summary(report, out, args.format, allure_dir, result_line=line)
    code = exit_code(report)
    for t in report["targets"]:
        if t.get("start_error"):
            _err(f"target {t['spec']} failed to start: {t['start_error']}")
    if word in ("incomplete", "not-run"):
        return EXIT_USAGE
    if rc in _PYTEST_TROUBLE:
        _err(f"{_PYTEST_TROUBLE[rc]} (pytest exit code {rc}); see {out / 'pytest.log'}")
        return EXIT_USAGE
    if rc == 2:
        _err(f"pytest stopped early (collection errors?); see {out / 'pytest.log'}")
        return EXIT_USAGE
    if rc == 1 and code == EXIT_OK:
        # pytest saw a failure the results rows do not show (e.g. a collection error).
        _err(f"pytest reported failures that are not in the results rows; see {out / 'pytest.log'}")
        return EXIT_FAILED
    if report["summary"]["result"] == "no-results":
        _err(f"no results were written to {results_dir}; see {out / 'pytest.log'}")
    return code


def _build_and_write(results_dir: Path, out: Path, fmt: str, target_order: list[str] | None = None,
                     catalog: str | None = None, divergences: str | None = None,
                     deviations: str | None = None) -> dict[str, Any]:
    from reports.certification import build_report_from_dir, write_json
    from reports.html_report import write_html

    try:
        report = build_report_from_dir(results_dir, catalog, divergences, target_order=target_order,
                                       deviations_path=deviations)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError:
        raise UsageError(_not_utf8(results_dir)) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        if fmt in ("all", "json"):
            write_json(report, out / "report.json")
        if fmt in ("all", "html"):
            write_html(report, out / "report.html")
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc}") from None
    return report


def _not_utf8(results_dir: Path) -> str:
    """Name the results file that is not UTF-8 (rows are JSON lines, always UTF-8)."""
    for f in sorted(Path(results_dir).iterdir()):
        if f.is_file() and f.suffix in (".jsonl", ".ndjson", ".json"):
            try:
                f.read_bytes().decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"cannot read {f}: not UTF-8 text (byte {exc.start}); is it a kipcheck results file?"
    return f"cannot read the results in {results_dir}: a file is not UTF-8 text"


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
    from reports.certification import summary_lines

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
    if args.out:
        out = Path(args.out).resolve()
    else:
        out = results_dir.parent if results_dir.name == "results" else results_dir
    _load_catalog_or_fail(args.catalog)
    report = _build_and_write(results_dir, out, args.format, catalog=args.catalog, divergences=args.divergences,
                              deviations=args.deviations)
    from conformance import run_status
    from reports.certification import exit_code

    word, line = run_status.outcome(run_status.load(results_dir), report["summary"]["result"])
    _print_summary(report, out, args.format, result_line=line)
    code = EXIT_USAGE if word in ("incomplete", "not-run") else exit_code(report)
    for t in report["targets"]:
        if t.get("start_error"):
            _err(f"target {t['spec']} failed to start: {t['start_error']}")
    if report["summary"]["result"] == "no-results":
        _err(f"no result rows in {results_dir}")
    return code


def _load_catalog_or_fail(path: str | None) -> list[dict[str, Any]]:
    """The catalog; an invalid one is read without validation after a warning."""
    from reports.certification import CatalogProblem, load_catalog_docs

    if path is not None and not Path(path).is_dir():
        raise UsageError(f"catalog directory {path} does not exist")
    try:
        docs = load_catalog_docs(path)
    except CatalogProblem as exc:
        lines = str(exc).splitlines()
        shown = lines[1:6]
        more = len(lines) - 1 - len(shown)
        print(
            "kipcheck: warning: " + lines[0] + "\n" + "\n".join(shown)
            + (f"\n  ... and {more} more" if more > 0 else "")
            + "\n(read without validation)",
            file=sys.stderr,
            flush=True,
        )
        docs = load_catalog_docs(path, strict=False)
    if not docs:
        raise UsageError(f"the requirement catalog {path or '(packaged)'} is empty or missing")
    return docs


# ---------------------------------------------------------------------------------
# catalog


class _MarkerCollector:
    """A pytest plugin object that records the requirement ids each collected test claims."""

    def __init__(self) -> None:
        self.by_test: dict[str, list[str]] = {}

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            ids: list[str] = []
            for m in item.iter_markers("requirement"):
                ids.extend(str(a) for a in m.args)
            self.by_test[item.nodeid] = ids


def collect_requirement_claims() -> dict[str, list[str]] | None:
    """Collect the suites in-process; test nodeid -> requirement ids. None if not possible."""
    import importlib.util

    try:
        if importlib.util.find_spec(SUITES_PACKAGE) is None:
            return None
        import pytest
    except Exception:
        return None
    collector = _MarkerCollector()
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "--pyargs", SUITES_PACKAGE]
    if not _plugin_registered():
        args[4:4] = ["-p", PLUGIN_MODULE]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = pytest.main(args, plugins=[collector])
    except Exception:
        return None
    if rc not in (0, 5):
        return None
    return collector.by_test


def cmd_catalog(args: argparse.Namespace) -> int:
    from reports.certification import build_report, normalize_kip, read_results

    docs = _load_catalog_or_fail(args.catalog)
    wanted = {normalize_kip(k).upper() for k in args.kip or []}
    if wanted:
        known = {d["kip"].upper() for d in docs}
        missing = sorted(wanted - known)
        if missing:
            raise UsageError(f"unknown KIP {', '.join(missing)}; the catalog has {', '.join(d['kip'] for d in docs)}")
        docs = [d for d in docs if d["kip"].upper() in wanted]

    rows: list[dict[str, Any]] = []
    specs: list[str] = []
    if args.results:
        rdir = Path(args.results)
        if not rdir.is_dir():
            raise UsageError(f"results directory {args.results} does not exist")
        try:
            report = build_report(read_results(rdir), docs)
        except UnicodeDecodeError:
            raise UsageError(_not_utf8(rdir)) from None
        specs = [t["spec"] for t in report["targets"]]
        for r in report["requirements"]:
            if not r["in_catalog"]:
                continue
            rows.append(
                {
                    "id": r["id"],
                    "kip": r["kip"],
                    "level": r["level"],
                    "behaviour": r["behaviour"],
                    "tests": [t["nodeid"] for t in r["tests"]],
                    "verdicts": {s: r["per_target"][s]["verdict"] for s in specs},
                }
            )
        source = f"results in {rdir}"
    else:
        claims = None if args.no_collect else collect_requirement_claims()
        by_req: dict[str, list[str]] = {}
        for nodeid, ids in (claims or {}).items():
            for rid in ids:
                by_req.setdefault(rid, []).append(nodeid)
        for d in docs:
            for r in d["requirements"]:
                rows.append(
                    {
                        "id": r["id"],
                        "kip": d["kip"],
                        "level": r["level"],
                        "behaviour": r["behaviour"],
                        "tests": sorted(by_req.get(r["id"], [])) if claims is not None else None,
                    }
                )
        if claims is None:
            if args.untested and not args.no_collect:
                raise UsageError("cannot tell which requirements are untested: collecting the conformance suites failed "
                                 "(try `kipcheck catalog --results OUT/results`)")
            source = "catalog only (suites not collected)"
        else:
            source = f"collected {len(claims)} tests from {SUITES_PACKAGE}"
    reasons = _untested_reasons(args.catalog)
    for row in rows:
        row["untested_reason"] = reasons.get(row["id"])
    if args.untested:
        if args.no_collect and not args.results:
            raise UsageError("--untested needs test coverage: drop --no-collect or pass --results")
        rows = [r for r in rows if not r["tests"]]

    if args.json:
        print(json.dumps({"source": source, "targets": specs, "requirements": rows}, indent=2))
        return EXIT_OK
    _print_catalog(rows, specs, docs, source)
    return EXIT_OK


def _untested_reasons(path: str | None) -> dict[str, str]:
    """Requirement id -> its catalogued `untested_reason` ({} for an invalid catalog)."""
    from registers.catalog import CatalogError, load_catalog

    try:
        catalog = load_catalog(path) if path is not None else load_catalog()
    except CatalogError:
        return {}
    return {r.id: r.untested_reason for r in catalog if r.untested_reason}


def _print_catalog(rows: list[dict[str, Any]], specs: list[str], docs: list[dict[str, Any]], source: str) -> None:
    width = shutil.get_terminal_size((120, 24)).columns
    titles = {d["kip"]: d.get("title") or "" for d in docs}
    idw = max([len(r["id"]) for r in rows] + [2])
    by_kip: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kip.setdefault(r["kip"], []).append(r)
    def coverage_text(r: dict[str, Any]) -> str:
        if specs:
            return "  ".join(f"{s}={r['verdicts'][s]}" for s in specs)
        if r["tests"] is None:
            return ""
        if r["tests"]:
            return f"{len(r['tests'])} test(s)"
        return "explained" if r.get("untested_reason") else "NO TEST"

    covw = max([len(coverage_text(r)) for r in rows] + [0])
    for d in docs:
        kip = d["kip"]
        items = by_kip.get(kip, [])
        total = len(d["requirements"])
        untested = [r for r in items if r["tests"] is not None and not r["tests"]] if not specs else None
        head = f"{kip}  {titles.get(kip, '')}  ({len(items)} of {total} requirements"
        if untested is not None and rows and items and items[0]["tests"] is not None:
            explained = sum(1 for r in untested if r.get("untested_reason"))
            head += f", {len(untested)} without a test, {explained} of them explained"
        print(head + ")")
        # unexplained gaps first; ids with a written reason apart, after them
        items = sorted(items, key=lambda r: bool(not r["tests"] and r.get("untested_reason")))
        for r in items:
            cov = coverage_text(r).ljust(covw)
            level = (r["level"] or "").upper()
            prefix = f"  {r['id'].ljust(idw)}  {level:<6}  {cov}  " if cov else f"  {r['id'].ljust(idw)}  {level:<6}  "
            room = max(width - len(prefix), 30)
            behaviour = r["behaviour"] or ""
            if len(behaviour) > room:
                behaviour = behaviour[: room - 1] + "…"
            print(prefix + behaviour)
            if not r["tests"] and r.get("untested_reason"):
                print(textwrap.fill("explained: " + r["untested_reason"], width=max(width, 60),
                                    initial_indent=" " * 4, subsequent_indent=" " * 15))
        print()
    print(f"({source})")


# ---------------------------------------------------------------------------------
# broker


def cmd_record(args: argparse.Namespace) -> int:
    from replay.record_cmd import record

    return record(
        args.upstream, args.listen, args.out, args.payloads,
        segment_max_bytes=args.segment_max_bytes,
        segment_max_seconds=args.segment_max_seconds,
        advertised_host=args.advertised_host,
        writer=args.writer,
    )


def cmd_broker(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    if not 0 <= args.port <= 65535 or (args.port and args.port + args.brokers - 1 > 65535):
        raise UsageError(f"--port {args.port} is out of range for {args.brokers} broker(s)")
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from reference_impl.server.broker_server import ReferenceCluster
    except Exception as exc:
        raise UsageError(f"the reference broker cannot be loaded: {exc}") from None

    async def serve() -> None:
        cluster = ReferenceCluster(
            brokers=args.brokers, host=args.host, port=args.port, advertised_host=args.advertised_host
        )
        try:
            await cluster.start()
        except OSError as exc:  # port in use, bad address
            await _quiet_stop(cluster)
            raise UsageError(str(exc)) from None
        except Exception as exc:
            await _quiet_stop(cluster)
            raise UsageError(f"the reference broker failed to start: {type(exc).__name__}: {exc}") from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        print(f"bootstrap={cluster.bootstrap_servers}", flush=True)
        print(f"kipcheck reference broker: {args.brokers} node(s); stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
        try:
            await stop.wait()
        finally:
            await cluster.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:  # signal handler not installed (e.g. not the main thread)
        pass
    print("kipcheck reference broker stopped", file=sys.stderr, flush=True)
    return EXIT_OK


async def _quiet_stop(cluster: Any) -> None:
    with contextlib.suppress(Exception):
        for sock in list(getattr(cluster, "_sockets", {}).values()):
            sock.close()


# ---------------------------------------------------------------------------------
# target up


def cmd_target(args: argparse.Namespace) -> int:
    if args.target_command != "up":  # pragma: no cover - argparse enforces the choices
        raise UsageError(f"unknown target action {args.target_command!r}")
    _parse_specs([args.spec])
    try:
        from targets.target_up import target_up
    except ImportError as exc:
        raise UsageError(f"`kipcheck target up` is not available in this build: {exc}") from None
    try:
        rc = target_up(args.spec)
    except ValueError as exc:
        raise UsageError(f"bad target spec {args.spec!r}: {exc}") from None
    except Exception as exc:
        # TargetError and provider failures: say what went wrong, no traceback.
        raise UsageError(f"target {args.spec} failed: {exc}") from None
    return rc if isinstance(rc, int) else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
