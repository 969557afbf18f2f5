"""Wall time of `kipcheck certify` per target and xdist worker count:
``python -m benchmarks.run --suite certify [--targets reference,reference:nodes=3]
[--workers 1,4] [--quick] [--json OUT]``.

Every (target, workers) pair runs `kipcheck certify` as a subprocess in this one
invocation, interleaved (pair 1, pair 2, ... then again with `--repeat`), so that the
pairs are compared under the same machine load: on a shared machine the absolute seconds
move with the load, the ratio between rows much less. Each row carries the 1-minute load
average (os.getloadavg) before and after it. `--quick` certifies the kip98 suite only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COLUMNS = ("target", "workers", "wall s", "cpu s", "pass", "fail", "not supp.", "exit", "load before", "load after")
QUICK_SELECTION = "kip98"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run --suite certify", description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="reference,reference:nodes=3", help="comma-separated target specs")
    p.add_argument("--workers", default="1,6", help="comma-separated xdist worker counts (default 1,6: the old and the new certify default)")
    p.add_argument("--repeat", type=int, default=1, help="rounds over all pairs (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one certify run may take (default 1800)")
    p.add_argument("--quick", action="store_true", help=f"certify the {QUICK_SELECTION} suite only")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    return p.parse_args(argv)


def certify_once(target: str, workers: str, quick: bool, timeout_s: float) -> dict[str, Any]:
    """One `kipcheck certify` run in a subprocess; its wall time and verdict counts."""
    out = tempfile.mkdtemp(prefix="kipcheck-bench-certify-")
    cmd = [sys.executable, "-m", "conformance.cli", "certify", "--target", target, "-n", workers, "--out", out,
           "--format", "json"]
    if quick:
        cmd += ["--suite", QUICK_SELECTION]
    load_before = os.getloadavg()[0]
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s,
                              check=False)
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    wall = time.monotonic() - started
    tests: dict[str, int] = {}
    report = Path(out) / "report.json"
    if report.exists():
        tests = json.loads(report.read_text())["summary"]["tests"]
    return {"target": target, "workers": workers, "wall_s": round(wall, 1),
            "cpu_s": round(_children_cpu_s() - cpu_before, 1), "exit": code,
            "pass": tests.get("pass"), "fail": tests.get("fail", 0) + tests.get("error", 0) if tests else None,
            "not_supported": tests.get("not_supported"), "load_before": round(load_before, 1),
            "load_after": round(os.getloadavg()[0], 1), "out": out}


def _children_cpu_s() -> float:
    """User + system CPU of waited-for descendants (the certify run, its pytest workers,
    the copier subprocesses): what the run costs whatever the load; CPU s / cores is the
    shortest wall time any worker count can reach on an idle machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    keys = ("target", "workers", "wall_s", "cpu_s", "pass", "fail", "not_supported", "exit", "load_before", "load_after")
    cells = [[str(r[k]) for k in keys] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines += ratio_lines(rows)
    return lines


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per target: each worker count's wall time relative to the first one measured."""
    out = []
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        base = mine[0]
        for r in mine[1:]:
            if r["workers"] != base["workers"] and base["wall_s"]:
                out.append(f"{target}: -n {r['workers']} takes {r['wall_s'] / base['wall_s']:.2f}x "
                           f"the wall time of -n {base['workers']}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    workers = [w for w in args.workers.split(",") if w]
    rows = []
    for _ in range(args.repeat):
        for target in targets:
            for w in workers:
                print(f"  certify --target {target} -n {w} ...", file=sys.stderr, flush=True)
                rows.append(certify_once(target, w, args.quick, args.timeout))
    print("\n".join(table_lines(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0 if all(r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
