"""`kipcheck diff A B --out REPORT [--noise A2]`: compare two traces exchange by exchange.

Exit status: 0 no divergence (after noise cancellation), 1 divergences, 2 error (bad
input: missing dir, corrupt or partial segment, unknown schema version, undecoded frames;
or the job failed). Writes REPORT/divergences.parquet, summary.json, summary.md and
summary.html, and prints the summary. Runs unchanged under
``spark-submit --master URL replay/diff_cmd.py A B --out R``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq

if __package__ in (None, ""):  # run as a script (spark-submit replay/diff_cmd.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replay import diff_pure  # noqa: E402
from replay import engine_choice  # noqa: E402
from replay import diff_report  # noqa: E402
from replay.diff_input import DiffInputError, TraceInput, inspect_trace  # noqa: E402
from replay.spark_session import failure_line, get_spark  # noqa: E402
from reports.usage import non_empty_path, usage_line  # noqa: E402

EXIT_OK, EXIT_DIVERGED, EXIT_ERROR = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="trace directory of the first run (the baseline)")
    p.add_argument("b", metavar="B", help="trace directory of the run to compare with A")
    p.add_argument("--out", required=True, type=non_empty_path, help="report directory (created)")
    p.add_argument("--noise", metavar="A2", help="second run of the same target as A: fields that differ "
                                                  "between A and A2 are noise and suppressed")
    p.add_argument("--engine", choices=engine_choice.ENGINES, default=engine_choice.AUTO,
                   help=f"auto (default: pure up to {engine_choice.DIFF_PURE_LIMIT:,} exchanges in the larger "
                        "trace, else Spark), spark (DataFrames) or pure (plain Python)")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[2]); implies Spark")
    p.add_argument("--no-json", dest="json", action="store_false",
                   help="compare the structured columns only, not the response JSON")
    p.add_argument("--allow-partial", action="store_true",
                   help="diff the completed segments of a trace that has a partial (.tmp) segment")
    p.add_argument("--skip-undecoded", action="store_true",
                   help="leave exchanges whose frames did not decode out of the diff (counted in the summary)")


def _inspect(args: argparse.Namespace) -> dict[str, TraceInput | None]:
    opts = dict(allow_partial=args.allow_partial, skip_undecoded=args.skip_undecoded)
    return {
        "a": inspect_trace(args.a, **opts),
        "b": inspect_trace(args.b, **opts),
        "noise": inspect_trace(args.noise, **opts) if args.noise else None,
    }


def _run_pure(inputs: dict, args: argparse.Namespace) -> dict:
    table, result = diff_pure.run(inputs["a"], inputs["b"], inputs["noise"], args.json)
    pq.write_table(table, os.path.join(args.out, diff_report.DIVERGENCES))
    return result


def _run_spark(inputs: dict, args: argparse.Namespace) -> dict:
    from replay import diff_spark  # imports pyspark (heavy): only --engine spark needs it
    spark = get_spark("kipcheck-diff", args.master, conf=diff_spark.SPARK_CONF)
    _, result = diff_spark.run(spark, inputs["a"], inputs["b"], inputs["noise"], args.json,
                               out_path=os.path.join(os.path.abspath(args.out), diff_report.DIVERGENCES))
    return result


def _error(what: str) -> int:
    print(usage_line("diff", what), file=sys.stderr, flush=True)
    return EXIT_ERROR


def _largest(inputs: dict) -> int:
    return max(t.exchanges for t in inputs.values() if t is not None)


def run(args: argparse.Namespace) -> int:
    try:
        inputs = _inspect(args)
    except DiffInputError as exc:
        return _error(str(exc))
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        return _error(f"--out {args.out} exists and is not a directory")
    os.makedirs(args.out, exist_ok=True)
    choice = engine_choice.choose(args.engine, _largest(inputs), engine_choice.DIFF_PURE_LIMIT, args.master)
    try:
        if choice.engine == engine_choice.PURE:
            result = _run_pure(inputs, args)
        else:
            with engine_choice.SparkProgress("diff", f"{_largest(inputs)} exchange(s)"):
                result = _run_spark(inputs, args)
    except Exception as exc:  # noqa: BLE001 - the job failed: say so, exit 2, never a partial report
        return _error(f"the {choice.engine} diff failed: {failure_line(exc)}")
    summary = diff_report.build_summary(choice.engine, inputs, result, args.json)
    summary["engine_choice"] = choice.why
    diff_report.write_summary(args.out, summary)
    print(diff_report.to_markdown(summary))
    print(f"kipcheck diff: {summary['verdict']}; report in {args.out}")
    return summary["exit_status"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kipcheck diff", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
