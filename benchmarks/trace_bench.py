"""Trace checks, diffs and capture side by side: ``python -m benchmarks.run --suite trace``.

One invocation, one table (issue 27, item 5): for each size (default 100k and 1M exchanges;
``--with-10m`` adds 10M; ``--quick``: 100k) `kipcheck check` on the pure engine, Spark
local[1] and local[2], on the recorded layout and, rows ``v3:MASTER``, on the compacted one
through its event table (the compaction timed as a row of its own), and `kipcheck diff` on the pure engine, DuckDB (the SQL baseline of
benchmarks.trace_diff_bench), local[1] and local[2], on the recorded layout and, rows
``v3:MASTER``, on the compacted one (kipcheck compact, untimed); ``--standalone`` adds a loopback
standalone cluster (replay.spark_standalone: master + 2 workers of 1 core, executors on a
venv without kipcheck) to both, and ``--cluster-100m`` a 100M-exchange trace on that cluster
only. Then the fixed cost (the whole `kipcheck check` command on a 200-exchange trace) and
the capture proxy's rows (benchmarks.proxy_bench on the reference: confluent-kafka produce
and consume direct, through the bare relay and through `kipcheck record`; the capture's
throughput over direct and over the relay, and CPU per MB of values). There is no DuckDB
*check* engine: DuckDB is the diff's SQL baseline only. Traces are synthetic with injected
anomalies / differences; every row says whether found == injected. Every row carries the
1-minute load average measured when it finished, and the table starts with the load: the
machine is shared, and a number means little without it. A run over `--budget` seconds
skips the remaining rows (shown as such). The pure engines hold the whole trace in memory:
a size over their limit (replay.engine_choice) is a skipped row, not an out-of-memory kill.
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

from benchmarks import proxy_bench as pb
from benchmarks.bench_clients import cell
from benchmarks import trace_check_bench as cb
from benchmarks import trace_diff_bench as db
from benchmarks.compact_bench import measure
from replay import diff_pure
from replay.check_pure import check_table
from replay.diff_input import inspect_trace
from replay.engine_choice import CHECK_PURE_LIMIT, DIFF_PURE_LIMIT
from replay.spark_standalone import StandaloneCluster, executor_venv
from replay.synthetic_traces import generate
from replay.trace_reader import read_trace

FULL = (100_000, 1_000_000)
QUICK = (100_000,)
TEN_M = 10_000_000
HUNDRED_M = 100_000_000  # --cluster-100m: the standalone cluster only
# v3:MASTER checks the compacted trace (its event table); the compaction is a row of its own
CHECK_ENGINES = ("pure", "local[1]", "local[2]", db.V3_PREFIX + "local[1]", db.V3_PREFIX + "local[2]")
# v3:MASTER diffs the compacted traces (kipcheck compact; the compaction itself untimed)
DIFF_ENGINES = ("pure", "duckdb", "local[1]", "local[2]", db.V3_PREFIX + "local[1]", db.V3_PREFIX + "local[2]")
PURE_LIMITS = {"check": CHECK_PURE_LIMIT, "diff": DIFF_PURE_LIMIT}
# capture rows: confluent-kafka produce/consume of PROXY_VALUES x 1 KiB, PROXY_REPEAT times per side
PROXY_VALUES, PROXY_REPEAT, PROXY_ROUND_TRIPS = 200_000, 3, 200
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


def pure_diff(a_dir: str, b_dir: str) -> dict:
    t0 = time.perf_counter()
    table, _ = diff_pure.run(inspect_trace(a_dir), inspect_trace(b_dir), None, False)
    found = list(zip(*(table.column(c).to_pylist() for c in ("kind", "a_seq", "path"))))
    return {"seconds": time.perf_counter() - t0, "found": found}


def pure_child(call: str, memory_fraction: float = 0.75) -> dict:
    """`call` (pure_check(...) / pure_diff(...) of this module) in a child process limited to
    `memory_fraction` of the machine's memory (RLIMIT_AS): the pure engines hold the whole
    trace as Python rows (a 10M-exchange trace took the benchmark to 23.6 GB and the
    kernel's OOM killer), and a row that does not fit must fail alone, with its peak
    memory, not take the run down."""
    limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * memory_fraction)
    code = ("import json, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
            "from benchmarks.trace_bench import pure_check, pure_diff; "
            "print('RESULT', json.dumps(%s))" % (limit, limit, call))
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


HEADER = f"{'what':<17} {'engine':<26} {'size':>13} {'seconds':>9} {'rate':>14} {'load1':>6}  result"


def print_row(r: dict) -> None:
    size = r.get("size") or f"{r['exchanges']:,}"
    rate = r.get("rate_text") or (f"{r['rate']:,} ex/s" if r["rate"] else "-")
    secs = r["seconds"] if r["seconds"] is not None else "-"
    print(f"{r['what']:<17} {r['engine']:<26} {size:>13} {secs:>9} {rate:>14} {r['load']:>6}  {r['check']}",
          flush=True)


def _runs(engines: tuple, not_spark: str | tuple, baseline: str | None) -> list[tuple[str, str, str]]:
    """(engine, label suffix, checkout): each Spark engine on this checkout's code and, with
    --baseline, on the other one's, back to back; `not_spark` (pure, DuckDB) once."""
    runs = [(e, "", ROOT) for e in engines if e in not_spark]
    for e in (e for e in engines if e not in not_spark):
        runs += [(e, " [base]", baseline)] * (baseline is not None) + [(e, " [new]" if baseline else "", ROOT)]
    return runs


def _skip(what: str, engine: str, n: int, budget_end: float) -> str | None:
    if time.monotonic() > budget_end:
        return "skipped: over budget"
    if engine == "pure" and n > PURE_LIMITS[what]:
        return f"skipped: over the pure engine's limit ({PURE_LIMITS[what]:,}, replay/engine_choice.py)"
    return None


def compacted(path: str, n: int, rows: list[dict]) -> str:
    """PATH.v3 (kipcheck compact, with the check's event table), made once per size; its
    time is a row of the table (a recording pays it once, every check after it reads it)."""
    out = path + ".v3"
    if not os.path.isdir(out):
        c = measure(path, out)
        rows.append(_row("compact (DuckDB, + event table)", "duckdb", n, c["seconds"],
                         f"{c['buckets']} buckets; peak disk {c['peak_disk_gb']} GB, RSS {c['peak_rss_gb']} GB"))
        print_row(rows[-1])
    return out


def run_size(n: int, base: str, cluster, budget_end: float, engines: tuple, diff_engines: tuple,
             baseline: str | None = None) -> list[dict]:
    rows = []
    path = os.path.join(base, f"trace-{n}")
    expected = sorted(tuple(x) for x in generate(path, n, seed=n % 9973)) if engines else []
    for engine, code, root in _runs(engines, ("pure",), baseline):
        label = engine + code
        skipped = _skip("check", engine, n, budget_end)
        if skipped:
            rows.append(_row("check", label, n, None, skipped))
            print_row(rows[-1])
            continue
        try:
            trace, name = path, engine.removeprefix(db.V3_PREFIX)
            if engine.startswith(db.V3_PREFIX):
                trace = compacted(path, n, rows)
            if engine == "pure":
                r = pure_child(f"pure_check({path!r})")
            else:
                master = cluster.master_url if name == "standalone" else name
                r = _check_child(trace, master, cluster if name == "standalone" else None, root)
            exact = sorted(tuple(x) for x in r["found"]) == expected
            rows.append(_row("check", label, n, r["seconds"], f"found == injected ({len(expected)})" if exact
                             else f"WRONG ({len(r['found'])} found, {len(expected)} injected)"))
        except Exception as exc:  # noqa: BLE001 - a failed row is reported, the others run
            rows.append(_row("check", label, n, None, f"failed: {type(exc).__name__}: {str(exc)[:200]}"))
        print_row(rows[-1])
    if not diff_engines:
        return rows
    d = os.path.join(base, f"diff-{n}")
    a_dir, b_dir, expected_diff = db.make_traces(d, n, seed=7)
    a_files = sorted(os.path.join(a_dir, x) for x in os.listdir(a_dir))
    b_files = sorted(os.path.join(b_dir, x) for x in os.listdir(b_dir))
    for engine, code, root in _runs(diff_engines, ("pure", "duckdb"), baseline):
        label = engine + code
        skipped = _skip("diff", engine, n, budget_end)
        if skipped:
            rows.append(_row("diff", label, n, None, skipped))
            print_row(rows[-1])
            continue
        try:
            if engine == "pure":
                r = pure_child(f"pure_diff({a_dir!r}, {b_dir!r})")
                found, secs = [tuple(x) for x in r["found"]], r["seconds"]
            elif engine == "duckdb":
                found, secs = db.duckdb_diff(a_files, b_files)
            else:
                name = engine.removeprefix(db.V3_PREFIX)
                master = cluster.master_url if name == "standalone" else name
                with _executor_env(cluster if name == "standalone" else None):
                    found, secs = db._run_spark_process(master, a_dir, b_dir, 7200, root,
                                                        v3=engine.startswith(db.V3_PREFIX))
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


def proxy_rows(spec: str, values: int, repeat: int) -> list[dict]:
    """The capture rows (benchmarks.proxy_bench.bench_target on `spec`): produce and consume
    direct, through the bare relay, through `kipcheck record`; CPU per MB of values."""
    notes: list[str] = []
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    got = {r.workload: r for r in pb.bench_target(spec, values, PROXY_ROUND_TRIPS, 1024, repeat, log, notes)}
    size = f"{values // 1000}k x 1 KiB"
    rows = []
    for work in pb.THROUGHPUT:
        capture, relay = got[work], got.get(f"{work}, bare relay")
        sides = [("direct", capture.mid("direct"), None, "")]
        if relay is not None:
            sides.append(("bare relay", relay.mid("proxied"), relay.cpu_ms_per_mb, ""))
        sides.append(("capture (kipcheck record)", capture.mid("proxied"), capture.cpu_ms_per_mb,
                      f"{cell(capture.ratio, '.2f')}x direct, {cell(capture.vs_relay, '.2f')}x relay; "))
        for engine, rate, cpu, ratios in sides:
            mb_s = None if rate is None else rate * 1024 / 1e6
            check = ratios + ("" if cpu is None else f"CPU {cpu:.2f} ms/MB")
            rows.append({"what": f"capture {work}", "engine": engine, "exchanges": values, "size": size,
                         "seconds": None, "rate": None, "rate_text": cell(mb_s, ".1f") + " MB/s",
                         "check": check or f"median of {repeat}", "load": round(capture.load, 1)})
    for note in notes:
        rows.append({"what": "capture", "engine": "note", "exchanges": values, "size": "-", "seconds": None,
                     "rate": None, "rate_text": "-", "check": note.split(": ", 1)[1], "load": load()})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run --suite trace", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK} instead of {FULL}; capture rows of 50k values")
    p.add_argument("--sizes", help="comma-separated exchange counts (overrides the preset)")
    p.add_argument("--with-10m", action="store_true", help="add 10M exchanges to the sizes")
    p.add_argument("--standalone", action="store_true", help="add the loopback standalone cluster to check and diff")
    p.add_argument("--cluster-100m", action="store_true",
                   help="add a 100M-exchange check and diff on the standalone cluster only (hours on 2 cores)")
    p.add_argument("--engines", default=",".join(CHECK_ENGINES), help="check engines")
    p.add_argument("--diff-engines", default=",".join(DIFF_ENGINES), help="diff engines")
    p.add_argument("--proxy-target", default="reference",
                   help="target of the capture rows (reference: with the bare-relay rows); 'none': no capture rows")
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
    sizes += [TEN_M] * (a.with_10m and TEN_M not in sizes)
    standalone = ("standalone",) * (a.standalone or a.cluster_100m)
    diff_standalone = standalone + tuple(db.V3_PREFIX + e for e in standalone)
    engines = tuple(e for e in a.engines.split(",") if e) + diff_standalone
    diff_engines = tuple(e for e in a.diff_engines.split(",") if e) + diff_standalone
    base = a.dir or tempfile.mkdtemp(prefix="kipcheck-trace-bench-")
    budget_end = time.monotonic() + a.budget
    one, five, fifteen = os.getloadavg()
    print(f"kipcheck trace benchmark: {os.cpu_count()} cpu(s), load average {one:.1f} / {five:.1f} / {fifteen:.1f} "
          f"at the start; sizes {', '.join(f'{n:,}' for n in sizes)}" + (", 100M on the cluster" if a.cluster_100m else ""))
    print(HEADER)
    rows: list[dict] = []
    if not a.no_fixed_cost:
        for code, root in ([(" [base]", baseline), (" [new]", ROOT)] if baseline else [("", ROOT)]):
            rows.append(fixed_cost(base, code, root))
            print_row(rows[-1])
    cluster = None
    if any(e.removeprefix(db.V3_PREFIX) == "standalone" for e in engines + diff_engines):
        cluster = StandaloneCluster(executor_venv(), workers=2, worker_memory=EXECUTOR_MEMORY).start()
    try:
        for n in sizes:
            rows.extend(run_size(n, base, cluster, budget_end, engines, diff_engines, baseline))
        if a.cluster_100m:
            rows.extend(run_size(HUNDRED_M, base, cluster, budget_end, diff_standalone, diff_standalone))
    finally:
        if cluster is not None:
            cluster.stop()
    if a.proxy_target != "none":
        try:
            capture = proxy_rows(a.proxy_target, 50_000 if a.quick else PROXY_VALUES, 2 if a.quick else PROXY_REPEAT)
        except Exception as exc:  # noqa: BLE001 - the trace rows above still stand
            capture = [{"what": "capture", "engine": a.proxy_target, "exchanges": 0, "size": "-", "seconds": None,
                        "rate": None, "check": f"failed: {type(exc).__name__}: {str(exc)[:200]}", "load": load()}]
        for r in capture:
            print_row(r)
        rows += capture
    one, five, fifteen = os.getloadavg()
    print(f"machine: {os.cpu_count()} cpu(s); load average {one:.1f} / {five:.1f} / {fifteen:.1f} at the end; "
          "load1 = 1-minute load average when the row finished; capture rows: medians over the repetitions, "
          f"targets >= {pb.THROUGHPUT_TARGET}x direct and <= {pb.CPU_MS_PER_MB_TARGET} ms CPU per MB")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0 if not any(r["check"].startswith(("WRONG", "failed")) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
