"""The comparison table (issue 26, README): implementation x KIP (and client suite), verdict
counts, as Markdown, from one certify results folder with several targets, with the command
that made it under the table.

    python -m reports.comparison RESULTS_DIR [--catalog DIR]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from reports.certification import build_report_from_dir
from reports.usage import EXIT_USAGE, UsageError, non_empty_path, usage_line

LEGEND = ("KIP cells: verdict (requirements pass/fail/not supported/untested); client-suite cells: the "
          "library's own tests pass/fail/skipped by the client, registered deviations apart.")


def _kip_cell(cell: Mapping[str, Any]) -> str:
    untested = cell.get("untested", 0) + cell.get("out_of_scope", 0) + cell.get("incomplete", 0)
    return f"{cell['verdict']} ({cell['pass']}/{cell['fail']}/{cell['not_supported']}/{untested})"


def _client_cell(suite: Mapping[str, Any] | None) -> str:
    if suite is None:
        return "not run"
    c = suite["counts"]
    failed = c["fail"] + c["unexpected_pass"] + c["error"]
    return f"{c['pass']}/{failed}/{c['skipped']}" + (f" +{c['registered']} registered" if c["registered"] else "")


def comparison_table(report: Mapping[str, Any], table_command: str) -> str:
    """The Markdown table of `report`, then the line naming the run and this table's command."""
    specs = [t["spec"] for t in report["targets"]]
    suites = sorted({(s["suite"], s["version"]) for s in report["clients"]["suites"]})
    by_target = {(s["suite"], s["target"]): s for s in report["clients"]["suites"]}
    for s in report["clients"]["suites"]:  # a target only client suites ran on is a row too
        if s["target"] not in specs:
            specs.append(s["target"])
    versions = {t["spec"]: t.get("version") for t in report["targets"]}
    head = ["implementation", *(k["kip"] for k in report["kips"]), *(f"{n} {v}" for n, v in suites)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for spec in specs:
        version = versions.get(spec)
        name = f"`{spec}`" + (f" ({version})" if version and version not in spec else "")
        cells = [_kip_cell(k["per_target"][spec]) if spec in k["per_target"] else "—" for k in report["kips"]]
        cells += [_client_cell(by_target.get((n, spec))) for n, _ in suites]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    run = report.get("run") or {}
    made_by = run.get("command")
    made_by = shlex.join(made_by) if isinstance(made_by, list) else made_by
    lines += ["", LEGEND,
              f"Made by `{made_by or 'an unrecorded command'}` ({run.get('finished_at') or 'unknown time'}, "
              f"kipcheck {report.get('kipcheck_version')}); table: `{table_command}`."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.comparison", description=__doc__.split("\n\n")[0])
    p.add_argument("results_dir", metavar="RESULTS_DIR", type=non_empty_path)
    p.add_argument("--catalog", metavar="DIR", type=non_empty_path, help="requirement catalog (default: packaged)")
    args = p.parse_args(argv)
    try:
        if not Path(args.results_dir).is_dir():
            raise UsageError(f"results directory {args.results_dir} does not exist")
        report = build_report_from_dir(args.results_dir, args.catalog)
    except UsageError as exc:  # reports.seal.SealError among them
        print(usage_line("comparison", exc.what, exc.hint), file=sys.stderr)
        return EXIT_USAGE
    command = shlex.join(["python", "-m", "reports.comparison", *(argv if argv is not None else sys.argv[1:])])
    sys.stdout.write(comparison_table(report, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
