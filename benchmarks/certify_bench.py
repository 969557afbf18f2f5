"""Wall time and CPU of `kipcheck certify` per target and xdist worker count:
``python -m benchmarks.run --suite certify [--targets reference,reference:nodes=3]
[--workers 4,6] [--baseline DIR] [--repeat N] [--quick] [--json OUT]``.

Every (code, target, workers) triple runs `kipcheck certify` as a subprocess in this one
invocation, interleaved (row 1, row 2, ... then again with `--repeat`), so that the rows
are compared under the same machine load: on a shared machine the absolute seconds move
with the load, the ratio between rows much less. CPU seconds (user + system of the run and
all its workers) move far less with the load than wall time; CPU s / cores is the
shortest wall time the run could reach on an idle machine. Each row carries the 1-minute
load average (os.getloadavg) before the run and its mean over the run. `--baseline DIR`
adds rows running another checkout's code (PYTHONPATH=DIR, e.g. a worktree of main).
`--quick` certifies the kip98 suite only.
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

COLUMNS = ("code", "target", "workers", "wall s", "cpu s", "pass", "fail", "not supp.", "exit", "load before",
           "load mean")
LOAD_SAMPLE_S = 2.0
QUICK_SELECTION = "kip98"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run --suite certify", description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="reference", help="comma-separated target specs (default: reference)")
    p.add_argument("--workers", default="8", help="comma-separated xdist worker counts (default 8: certify's default)")
    p.add_argument("--baseline", metavar="DIR", help="also run the code of this checkout (PYTHONPATH=DIR), interleaved")
    p.add_argument("--repeat", type=int, default=1, help="rounds over all pairs (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one certify run may take (default 1800)")
    p.add_argument("--quick", action="store_true", help=f"certify the {QUICK_SELECTION} suite only")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    return p.parse_args(argv)


def certify_once(target: str, workers: str, quick: bool, timeout_s: float, code_dir: str | None = None) -> dict[str, Any]:
    """One `kipcheck certify` run in a subprocess (this checkout's code, or code_dir's);
    its wall time, CPU, the load around it and the verdict counts."""
    out = tempfile.mkdtemp(prefix="kipcheck-bench-certify-")
    cmd = [sys.executable, "-m", "cli.main", "certify", "--target", target, "-n", workers, "--out", out,
           "--format", "json"]
    if quick:
        cmd += ["--suite", QUICK_SELECTION]
    env = dict(os.environ, PYTHONPATH=code_dir) if code_dir else None
    load_before = os.getloadavg()[0]
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    code, loads = _run_sampling_load(cmd, env, timeout_s)
    wall = time.monotonic() - started
    tests: dict[str, int] = {}
    report = Path(out) / "report.json"
    if report.exists():
        tests = json.loads(report.read_text())["summary"]["tests"]
    return {"code": code_dir or "this", "target": target, "workers": workers, "wall_s": round(wall, 1),
            "cpu_s": round(_children_cpu_s() - cpu_before, 1), "exit": code,
            "pass": tests.get("pass"), "fail": tests.get("fail", 0) + tests.get("error", 0) if tests else None,
            "not_supported": tests.get("not_supported"), "load_before": round(load_before, 1),
            "load_mean": round(sum(loads) / len(loads), 1) if loads else None, "out": out}


def _run_sampling_load(cmd: list[str], env: dict[str, str] | None, timeout_s: float) -> tuple[int | str, list[float]]:
    """Run cmd to its end, sampling the 1-minute load average every LOAD_SAMPLE_S."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout_s
    loads: list[float] = []
    while True:
        try:
            return proc.wait(timeout=LOAD_SAMPLE_S), loads
        except subprocess.TimeoutExpired:
            loads.append(os.getloadavg()[0])
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return "timeout", loads


def _children_cpu_s() -> float:
    """User + system CPU of waited-for descendants (the certify run, its pytest workers,
    the copier subprocesses): what the run costs whatever the load; CPU s / cores is the
    shortest wall time any worker count can reach on an idle machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    keys = ("code", "target", "workers", "wall_s", "cpu_s", "pass", "fail", "not_supported", "exit", "load_before",
            "load_mean")
    cells = [[str(r[k]) for k in keys] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines += ratio_lines(rows)
    return lines


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per target: each other row's wall time and CPU relative to the first one measured."""
    out = []
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        base = mine[0]
        for r in mine[1:]:
            if (r["workers"], r["code"]) != (base["workers"], base["code"]) and base["wall_s"] and base["cpu_s"]:
                out.append(f"{target}: {r['code']} -n {r['workers']} takes {r['wall_s'] / base['wall_s']:.2f}x the wall "
                           f"time and {r['cpu_s'] / base['cpu_s']:.2f}x the CPU of {base['code']} -n {base['workers']}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    workers = [w for w in args.workers.split(",") if w]
    codes: list[str | None] = [None] + ([args.baseline] if args.baseline else [])
    rows = []
    for _ in range(args.repeat):
        for target in targets:
            for w in workers:
                for code_dir in codes:
                    print(f"  certify --target {target} -n {w} ({code_dir or 'this checkout'}) ...", file=sys.stderr,
                          flush=True)
                    rows.append(certify_once(target, w, args.quick, args.timeout, code_dir))
    print("\n".join(table_lines(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0 if all(r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
