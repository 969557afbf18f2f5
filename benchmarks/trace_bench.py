"""Trace checks and diffs at scale, side by side: ``python -m benchmarks.run --suite trace``.

One table (issue 13, item 6): for each size (default 100k, 1M, 10M exchanges; ``--quick``:
100k) `kipcheck check` on the pure engine, Spark local[1], local[2] and a loopback standalone
cluster (replay.spark_standalone: master + 2 workers of 1 core, executors on a venv without
kipcheck), and `kipcheck diff` on DuckDB (the SQL baseline of benchmarks.trace_diff_bench),
local[2] and the standalone cluster; plus the fixed cost: the whole `kipcheck check` command
(process, Spark start-up, job) on a 200-exchange trace. Traces are synthetic with injected
anomalies / differences; every row says whether found == injected. Every row carries the
1-minute load average measured when it finished: the machine is shared, and a number means
little without it. A run over `--budget` seconds skips the remaining rows (shown as such).
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

from benchmarks import trace_check_bench as cb
from benchmarks import trace_diff_bench as db
from replay.check_pure import check_table
from replay.spark_standalone import StandaloneCluster, executor_venv
from replay.synthetic_traces import generate
from replay.trace_reader import read_trace

FULL = (100_000, 1_000_000, 10_000_000)
QUICK = (100_000,)
CHECK_ENGINES = ("pure", "local[1]", "local[2]", "standalone")
DIFF_ENGINES = ("duckdb", "local[2]", "standalone")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# each of the 2 executors gets half of what local mode's one JVM gets (get_spark: 4g), so
# the cluster rows hold the same data in the same memory (1g executors would spill a 10M trace)
EXECUTOR_MEMORY = "2g"


def load() -> float:
    return round(os.getloadavg()[0], 1)


def pure_check(path: str) -> dict:
    t0 = time.perf_counter()
    table, _ = read_trace(path)
    found = [(v["rule_id"], v["seq"]) for v in check_table(table)]
    return {"rows": table.num_rows, "seconds": time.perf_counter() - t0, "found": found}


def pure_check_child(path: str, memory_fraction: float = 0.75) -> dict:
    """pure_check in a child process limited to `memory_fraction` of the machine's memory
    (RLIMIT_AS): the pure engine holds the whole trace as Python rows (a 10M-exchange trace
    took the benchmark to 23.6 GB and the kernel's OOM killer), and a row that does not fit
    must fail alone, with its peak memory, not take the run down."""
    limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * memory_fraction)
    code = ("import json, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
            "from benchmarks.trace_bench import pure_check; "
            "print('RESULT', json.dumps(pure_check(%r)))" % (limit, limit, path))
    result, proc = cb.run_for_result(["-c", code])
    if result is not None:
        return result
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    raise RuntimeError(f"{last[:150]} (limit {limit / 2**30:.1f} GiB, peak RSS of the benchmark's children "
                       f"{peak_gb:.1f} GiB)")


def fixed_cost(base: str, code: str = "", root: str = ROOT) -> dict:
    """Wall seconds of the whole command on a 200-exchange trace (start-up included), on
    the code of checkout `root`."""
    path = os.path.join(base, "trace-200")
    expected = sorted(generate(path, 200, seed=5))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "replay.check_cmd", path, "--out", os.path.join(base, "rep-200"),
                           "--master", "local[2]"], capture_output=True, text=True, cwd=root, timeout=1800,
                          env={**os.environ, "PYTHONPATH": root})
    secs = time.perf_counter() - t0
    ok = proc.returncode == (1 if expected else 0)
    return {"what": "check fixed cost", "engine": "local[2] (command)" + code, "exchanges": 200,
            "seconds": round(secs, 1), "rate": None,
            "check": "ok" if ok else f"exit {proc.returncode}: {proc.stderr[-300:]}", "load": load()}


def _row(what: str, engine: str, n: int, secs: float | None, check: str) -> dict:
    return {"what": what, "engine": engine, "exchanges": n, "seconds": None if secs is None else round(secs, 1),
            "rate": None if not secs else round(n / secs), "check": check, "load": load()}


def print_row(r: dict) -> None:
    rate = f"{r['rate']:,}" if r["rate"] else "-"
    secs = r["seconds"] if r["seconds"] is not None else "-"
    print(f"{r['what']:<17} {r['engine']:<26} {r['exchanges']:>11,} {secs:>9} {rate:>12} {r['load']:>6}  {r['check']}",
          flush=True)


def _runs(engines: tuple, not_spark: str, baseline: str | None) -> list[tuple[str, str, str]]:
    """(engine, label suffix, checkout): each Spark engine on this checkout's code and, with
    --baseline, on the other one's, back to back; `not_spark` (pure, DuckDB) once."""
    runs = [(e, "", ROOT) for e in engines if e == not_spark]
    for e in (e for e in engines if e != not_spark):
        runs += [(e, " [base]", baseline)] * (baseline is not None) + [(e, " [new]" if baseline else "", ROOT)]
    return runs


def run_size(n: int, base: str, cluster, budget_end: float, engines: tuple, diff_engines: tuple,
             baseline: str | None = None) -> list[dict]:
    rows = []
    path = os.path.join(base, f"trace-{n}")
    expected = sorted(tuple(x) for x in generate(path, n, seed=n % 9973))
    for engine, code, root in _runs(engines, "pure", baseline):
        label = engine + code
        if time.monotonic() > budget_end:
            rows.append(_row("check", label, n, None, "skipped: over budget"))
            print_row(rows[-1])
            continue
        try:
            if engine == "pure":
                r = pure_check_child(path)
            else:
                master = cluster.master_url if engine == "standalone" else engine
                r = _check_child(path, master, cluster if engine == "standalone" else None, root)
            exact = sorted(tuple(x) for x in r["found"]) == expected
            rows.append(_row("check", label, n, r["seconds"], f"found == injected ({len(expected)})" if exact
                             else f"WRONG ({len(r['found'])} found, {len(expected)} injected)"))
        except Exception as exc:  # noqa: BLE001 - a failed row is reported, the others run
            rows.append(_row("check", label, n, None, f"failed: {type(exc).__name__}: {str(exc)[:200]}"))
        print_row(rows[-1])
    d = os.path.join(base, f"diff-{n}")
    a_dir, b_dir, expected_diff = db.make_traces(d, n, seed=7)
    a_files = sorted(os.path.join(a_dir, x) for x in os.listdir(a_dir))
    b_files = sorted(os.path.join(b_dir, x) for x in os.listdir(b_dir))
    for engine, code, root in _runs(diff_engines, "duckdb", baseline):
        label = engine + code
        if time.monotonic() > budget_end:
            rows.append(_row("diff", label, n, None, "skipped: over budget"))
            print_row(rows[-1])
            continue
        try:
            if engine == "duckdb":
                found, secs = db.duckdb_diff(a_files, b_files)
            else:
                master = cluster.master_url if engine == "standalone" else engine
                with _executor_env(cluster if engine == "standalone" else None):
                    found, secs = db._run_spark_process(master, a_dir, b_dir, 7200, root)
            rows.append(_row("diff", label, n, secs, db._check(found, expected_diff)))
        except Exception as exc:  # noqa: BLE001
            rows.append(_row("diff", label, n, None, f"failed: {type(exc).__name__}: {str(exc)[:200]}"))
        print_row(rows[-1])
    return rows


class _executor_env:
    """For a child started inside the block: PYSPARK_PYTHON = the cluster's executor venv, and
    the executors' memory passed as spark-submit would (PYSPARK_SUBMIT_ARGS), unless set."""

    def __init__(self, cluster) -> None:
        self.cluster, self.old = cluster, {}

    def __enter__(self) -> None:
        if self.cluster is not None:
            keys = ("PYSPARK_PYTHON", "PYSPARK_SUBMIT_ARGS")
            self.old = {k: os.environ.get(k) for k in keys}
            os.environ["PYSPARK_PYTHON"] = self.cluster.executor_python
            os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                                  f"--conf spark.executor.memory={EXECUTOR_MEMORY} pyspark-shell")

    def __exit__(self, *exc: object) -> None:
        for key, value in self.old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _check_child(path: str, master: str, cluster, root: str) -> dict:
    with _executor_env(cluster):
        return cb.run_child(path, master, root)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run --suite trace", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK} instead of {FULL}")
    p.add_argument("--sizes", help="comma-separated exchange counts (overrides the preset)")
    p.add_argument("--engines", default=",".join(CHECK_ENGINES), help="check engines")
    p.add_argument("--diff-engines", default=",".join(DIFF_ENGINES), help="diff engines")
    p.add_argument("--budget", type=float, default=6 * 3600.0, help="seconds; later rows are skipped after it")
    p.add_argument("--no-fixed-cost", action="store_true")
    p.add_argument("--dir", help="where to write the traces (default: a temporary directory)")
    p.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    p.add_argument("--baseline", metavar="DIR", help="another checkout (e.g. `git archive` of the base commit): its "
                   "Spark check and fixed cost run next to this one's, rows marked [base] / [new]")
    a = p.parse_args(argv)
    baseline = os.path.abspath(a.baseline) if a.baseline else None
    if baseline and not os.path.isfile(os.path.join(baseline, "replay", "check_cmd.py")):
        p.error(f"--baseline {a.baseline}: no replay/check_cmd.py there (not a kipcheck checkout)")
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else list(QUICK if a.quick else FULL)
    engines = tuple(e for e in a.engines.split(",") if e)
    diff_engines = tuple(e for e in a.diff_engines.split(",") if e)
    base = a.dir or tempfile.mkdtemp(prefix="kipcheck-trace-bench-")
    budget_end = time.monotonic() + a.budget
    print(f"{'what':<17} {'engine':<26} {'exchanges':>11} {'seconds':>9} {'exch/s':>12} {'load1':>6}  result")
    rows: list[dict] = []
    if not a.no_fixed_cost:
        for code, root in ([(" [base]", baseline), (" [new]", ROOT)] if baseline else [("", ROOT)]):
            rows.append(fixed_cost(base, code, root))
            print_row(rows[-1])
    cluster = None
    if "standalone" in engines + diff_engines:
        cluster = StandaloneCluster(executor_venv(), workers=2, worker_memory=EXECUTOR_MEMORY).start()
    try:
        for n in sizes:
            rows.extend(run_size(n, base, cluster, budget_end, engines, diff_engines, baseline))
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"machine: {os.cpu_count()} cpu(s); load1 = 1-minute load average when the row finished")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0 if all(r["check"].startswith(("ok", "found ==", "skipped")) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
