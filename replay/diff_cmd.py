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
from replay import diff_report  # noqa: E402
from replay.diff_input import DiffInputError, TraceInput, inspect_trace  # noqa: E402
from replay.spark_session import failure_line, get_spark  # noqa: E402

EXIT_OK, EXIT_DIVERGED, EXIT_ERROR = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="trace directory of the first run (the baseline)")
    p.add_argument("b", metavar="B", help="trace directory of the run to compare with A")
    p.add_argument("--out", required=True, help="report directory (created)")
    p.add_argument("--noise", metavar="A2", help="second run of the same target as A: fields that differ "
                                                  "between A and A2 are noise and suppressed")
    p.add_argument("--engine", choices=("spark", "pure"), default="spark",
                   help="spark (default; DataFrames) or pure (plain Python, for small traces)")
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[2])")
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


def run(args: argparse.Namespace) -> int:
    try:
        inputs = _inspect(args)
    except DiffInputError as exc:
        print(f"kipcheck diff: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    os.makedirs(args.out, exist_ok=True)
    try:
        result = (_run_pure if args.engine == "pure" else _run_spark)(inputs, args)
    except Exception as exc:  # noqa: BLE001 - the job failed: say so, exit 2, never a partial report
        print(f"kipcheck diff: error: the {args.engine} diff failed: {failure_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    summary = diff_report.build_summary(args.engine, inputs, result, args.json)
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
