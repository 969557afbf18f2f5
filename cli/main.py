"""The `kipcheck` command line.

    kipcheck certify [--target SPEC]... [--out DIR] [--suite EXPR] [-n WORKERS]
                     [--test-timeout S] [--time-limit S] [-q] [-- PYTEST_ARGS]
    kipcheck report RESULTS_DIR [--out DIR]
    kipcheck verify DIR [--key PUBLIC_KEY]
    kipcheck catalog [--kip KIP] [--untested] [--results DIR]
    kipcheck broker [--host H] [--port P] [--brokers N]
    kipcheck target up SPEC

Exit codes: 0 success (certify/report: no test failed on any target; a narrowed run
reads PARTIAL SCOPE), 1 a test failed or errored, 2 usage or infrastructure error, an
unreachable target (NOT RUN) or an incomplete run (interrupted, --time-limit, crashed
worker). Bad input: one line `kipcheck <command>: error: <what> (<hint>)` on stderr, exit 2,
never a traceback (reports/usage.py).
certify records how complete the run was in OUT/results/run.json (conformance/run_status.py).
See docs/cli.md.

This module parses and dispatches; the bodies live in cli/certify.py (certify, report),
cli/catalog.py, cli/cluster.py (broker, target up, record) and, for replay, diff, check,
chaos, image and power, in the module MODULE_COMMANDS names.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Callable, Sequence

from chaos import chaos_cmd
from cli import catalog, certify, clients, cluster, verify
from cli.common import EXIT_OK, EXIT_USAGE, UsageError, err, running
from conformance import power
from replay import check_cmd, compact_cmd, diff_cmd, replay_cmd
from reports.certification import kipcheck_version
from reports.usage import non_empty_path, non_negative_int, positive_float, positive_int, usage_line
from targets import image_cmd

DEFAULT_OUT = "kipcheck-report"

#: Subcommands whose options (`add_arguments`) and body (`run`) live in their own module.
MODULE_COMMANDS = {
    "replay": replay_cmd,
    "diff": diff_cmd,
    "check": check_cmd,
    "compact": compact_cmd,
    "chaos": chaos_cmd,
    "image": image_cmd,
    "power": power,
    "verify": verify,
    "clients": clients,
}

#: Subcommand -> its body, which returns the exit code.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "certify": certify.cmd_certify,
    "report": certify.cmd_report,
    "catalog": catalog.cmd_catalog,
    "broker": cluster.cmd_broker,
    "target": cluster.cmd_target,
    "record": cluster.cmd_record,
    **{name: module.run for name, module in MODULE_COMMANDS.items()},
}


# ---------------------------------------------------------------------------------
# argument parsing


class _Parser(argparse.ArgumentParser):
    """argparse's refusals in the one-line format of every command (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        words = self.prog.split()
        command = words[1] if len(words) > 1 else None
        self.exit(EXIT_USAGE, usage_line(command, message, f"see {self.prog} --help") + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="kipcheck",
        description="Conformance suite for Kafka transactions (KIP-98/447), share groups (KIP-932) "
        "and KIP-1289: certify a target, run the reference broker, browse the requirement catalog.",
        epilog="Exit codes: 0 ok; 1 a conformance test failed or errored; 2 usage or infrastructure error.",
    )
    p.add_argument("--version", action="version", version=f"kipcheck {kipcheck_version()}")
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
        "librdkafka-mock, kfake, tansu[:storage=memory|sqlite], testcontainers:IMAGE, external:HOST:PORT "
        "(default: reference)",
    )
    c.add_argument("--out", "-o", default=DEFAULT_OUT, type=non_empty_path, metavar="DIR",
                   help=f"output directory (default: ./{DEFAULT_OUT})")
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
    c.add_argument("--sign-key", metavar="FILE", type=non_empty_path, help="sign the evidence seal with this Ed25519 private key (PEM)")
    c.add_argument("--quiet", "-q", action="store_true",
                   help="print only the final summary (pytest's output is always in OUT/pytest.log, "
                   "client library logs in OUT/run.log)")
    c.add_argument("--test-timeout", type=positive_float(), metavar="SECONDS",
                   help="deadline of every test, overriding its own (default: per test, see docs/cli.md)")
    c.add_argument("--time-limit", type=positive_float(), metavar="SECONDS",
                   help="stop the run after SECONDS; what ran is reported and the result is INCOMPLETE")
    c.add_argument("--clients", action="append", metavar="SUITE",
                   help="also run this client library's own suite on every target (franz-go; docs/clients.md)")
    c.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    r = sub.add_parser(
        "report",
        help="rebuild the report from an existing results directory",
        description="Rebuild report.json and report.html from the results rows of an earlier run.",
    )
    r.add_argument("results_dir", metavar="RESULTS_DIR", type=non_empty_path, help="directory holding *.jsonl result rows (e.g. OUT/results)")
    r.add_argument(
        "--out",
        "-o",
        type=non_empty_path,
        metavar="DIR",
        help="where to write the report (default: the parent of RESULTS_DIR when it is named `results`, else RESULTS_DIR)",
    )
    r.add_argument("--format", choices=("all", "json", "html"), default="all", help="report files to write (default: all)")
    r.add_argument("--catalog", metavar="DIR", type=non_empty_path, help="requirement catalog directory (default: the packaged catalog)")
    r.add_argument("--divergences", metavar="FILE", type=non_empty_path, help="divergence register (default: the packaged divergences.yaml)")
    r.add_argument("--deviations", metavar="FILE", type=non_empty_path, help="known-deviation register (default: the packaged deviations.yaml)")

    k = sub.add_parser(
        "catalog",
        help="list catalog requirements and their test coverage",
        description="List the requirement catalog. Coverage comes from --results (verdicts per target) "
        "or, without it, from collecting the conformance suites (which tests claim each requirement).",
    )
    k.add_argument("--kip", action="append", metavar="KIP", help="only this KIP (KIP-98, 98, PROTO, ...); repeatable")
    k.add_argument("--untested", action="store_true", help="only requirements that no test covers")
    k.add_argument("--results", metavar="DIR", type=non_empty_path, help="results directory of a run: show per-target verdicts")
    k.add_argument("--no-collect", action="store_true", help="do not collect the suites (no coverage column)")
    k.add_argument("--json", action="store_true", help="print JSON instead of a table")
    k.add_argument("--catalog", metavar="DIR", type=non_empty_path, help="requirement catalog directory (default: the packaged catalog)")

    b = sub.add_parser(
        "broker",
        help="run the reference broker in the foreground",
        description="Run the kipcheck reference broker (N nodes in one process) until SIGINT/SIGTERM. "
        "Prints `bootstrap=HOST:PORT[,...]` as its first line.",
    )
    b.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    b.add_argument("--port", type=non_negative_int(65535), default=9092, help="port of node 1; node i listens on PORT+i-1; 0 = ephemeral (default: 9092)")
    b.add_argument("--brokers", type=positive_int(), default=1, metavar="N", help="number of broker nodes (default: 1)")
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
    rec.add_argument("--out", required=True, type=non_empty_path, help="trace directory")
    rec.add_argument("--payloads", choices=("keep", "hash", "drop"), default="keep",
                     help="record keys/values/headers as sent, as SHA-256, or not at all (default: keep)")
    rec.add_argument("--segment-max-bytes", type=positive_int(), default=64 << 20)
    rec.add_argument("--segment-max-seconds", type=positive_float(), default=60.0)
    rec.add_argument("--advertised-host", default=None, help="host put in rewritten endpoints (default: listen host)")
    rec.add_argument("--writer", choices=("auto", "spool", "thread", "process"), default="auto",
                     help="spool raw frames and decode them when the recording ends (auto with --payloads keep), "
                          "or decode while recording in a thread (auto otherwise) or a child process")
    rec.add_argument("--no-compact", action="store_true",
                     help="do not end the recording with `kipcheck compact` into OUT.v3 (docs/traces.md)")

    _add_module_command(
        sub, "replay",
        help="re-issue a recorded trace against a target, recording the target's answers",
        description="Re-issue the requests of trace DIR against --target in per-connection and causal "
        "order, remapping the ids the target assigns, and write the target's answers as a new trace "
        "(see docs/replay.md). Exit 0 when every request was replayed, 1 when some could not be, 2 on error.",
    )
    _add_module_command(
        sub, "diff",
        help="compare two traces field by field (PySpark), with noise cancellation",
        description="Align the exchanges of traces A and B, normalize ids and noise (learned from --noise A2), "
        "and report the response fields that differ (see docs/trace-diff.md). Exit 0 when no divergence, "
        "1 when divergences, 2 on error. Runs unchanged under spark-submit.",
    )
    _add_module_command(
        sub, "check",
        help="check one trace against the KIP invariants and the reference state machines (PySpark)",
        description="Check trace DIR against the KIP-98 / KIP-447 / KIP-932 invariants and replay the "
        "reference state machines per entity (see docs/trace-checks.md). Exit 0 when no violation, 1 when "
        "violations, 2 on error. Runs unchanged under spark-submit.",
    )
    _add_module_command(sub, "compact", help="rewrite a trace in the bucketed layout check and diff read (schema 3)",
                        description="See docs/traces.md (schema version 3). Exit 0 written, 2 bad input.")
    _add_module_command(sub, "chaos", help="one seeded chaos run: workload + faults + checkers",
                       description="See docs/chaos-workloads.md. Exit 0 valid, 1 anomaly, 2 could not run, 3 unknown.")
    _add_module_command(sub, "image", help="build or load the apache/kafka image offline")
    _add_module_command(sub, "power", help="prove the suite catches every seeded reference bug",
                       description="See docs/suite-power.md. Exit 0 every bug caught, 1 a bug missed, 2 usage error.")
    _add_module_command(sub, "clients", help="run a client library's own integration suite against targets",
                        description="Build the suite once (pinned), run each test against every --target "
                        "under a deadline and write OUT/results and the report (see docs/clients.md). Exit 0 "
                        "pass, client skips and registered failures only; 1 otherwise; 2 bad input or a target "
                        "that did not start.")
    _add_module_command(sub, "verify", help="check a certification folder against its evidence seal",
                        description="See docs/certify-your-cluster.md. Exit 0 the rows, run.json and report.json "
                        "match the seal (and the key, with --key), 2 they do not.")
    return p


def _add_module_command(sub: Any, name: str, **texts: str) -> None:
    """A subcommand whose options come from its module's `add_arguments` (MODULE_COMMANDS)."""
    MODULE_COMMANDS[name].add_arguments(sub.add_parser(name, **texts))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        args.argv = argv
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code) if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    with running(args.command):
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; whatever stops it early is one `err` line, never a traceback."""
    try:
        return int(COMMANDS[args.command](args))
    except UsageError as exc:
        err(exc.what, exc.hint)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err("interrupted")
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `kipcheck catalog | head`
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")
        return EXIT_OK
    except UnicodeDecodeError as exc:
        err(f"cannot read {getattr(exc, 'kipcheck_path', 'an input file')}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return EXIT_USAGE
    except OSError as exc:
        err(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - never a traceback on the console
        if os.environ.get("KIPCHECK_DEBUG"):
            raise
        err(f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            "(set KIPCHECK_DEBUG=1 for the traceback)")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
