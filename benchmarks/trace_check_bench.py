"""Throughput of `kipcheck check` on Spark: ``python -m benchmarks.trace_check_bench [--quick]``.

Generates synthetic traces (replay.synthetic_traces, every anomaly kind injected once)
of two sizes (full: 1M and 10M exchanges; --quick: 100k and 1M), checks each on local[1]
and local[2], verifies that the violations found are exactly the injected ones, and prints
exchanges per second and the growth from the small to the large trace (time ratio over
size ratio: 1.0 is linear). Each master runs in its own Python process (a JVM keeps its
master for life), so every row includes the command's decode pass and reading the Parquet
segments but not the JVM start.
Besides wall time it reports the CPU seconds the Spark JVM and its Python workers used
(from /proc): on a shared, busy machine wall time mostly measures the other processes,
CPU time per exchange does not; cpu s / cores is the wall time to expect on idle cores
with perfect parallelism.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from replay.check_cmd import SPARK_CONF, ScanStats, run_spark, validate_segments
from replay.compact import compact
from replay.entity_replay import CheckConfig
from replay.spark_session import get_spark
from replay.synthetic_traces import generate

FULL = (1_000_000, 10_000_000)
QUICK = (100_000, 1_000_000)
MASTERS = ("local[1]", "local[2]")
V3_PREFIX = "v3:"  # a master written v3:local[2] checks the compacted trace (kipcheck compact, untimed)


def event_log_conf(log_dir: str) -> dict[str, str]:
    """Spark conf that writes the event log (per-stage times) into log_dir."""
    os.makedirs(log_dir, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir, "spark.eventLog.compress": "false"}


_METRICS = {"internal.metrics.executorRunTime": "task_s", "internal.metrics.executorCpuTime": "cpu_s",
            "internal.metrics.shuffle.write.bytesWritten": "shuffle_write_mb",
            "internal.metrics.shuffle.read.remoteBytesRead": "shuffle_read_mb",
            "internal.metrics.shuffle.read.localBytesRead": "shuffle_read_mb"}
_SCALE = {"task_s": 1e-3, "cpu_s": 1e-9, "shuffle_write_mb": 1e-6, "shuffle_read_mb": 1e-6}


def stage_breakdown(log_dir: str) -> list[dict]:
    """Per completed stage of the event log(s) in log_dir: id, name, tasks, wall seconds,
    task seconds, executor CPU seconds, shuffle MB written/read (Spark's own accounting)."""
    out = []
    files = sorted(os.path.join(d, n) for d, _, names in os.walk(log_dir) for n in names)  # Spark 4: a dir of rolled files
    for path in files:
        with open(path) as fh:
            for line in fh:
                if '"SparkListenerStageCompleted"' not in line:
                    continue
                info = json.loads(line)["Stage Info"]
                row = {"stage": info["Stage ID"], "name": info["Stage Name"][:60], "tasks": info["Number of Tasks"],
                       "wall_s": (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1e3,
                       **{k: 0.0 for k in _SCALE}}
                for acc in info.get("Accumulables", []):
                    key = _METRICS.get(acc.get("Name"))
                    if key is not None:
                        row[key] += float(acc.get("Value") or 0) * _SCALE[key]
                out.append(row)
    return out


def print_stages(stages: list[dict]) -> None:
    print(f"  {'stage':>5} {'tasks':>5} {'wall s':>7} {'task s':>7} {'cpu s':>7} {'shuf w MB':>9} {'shuf r MB':>9}  name")
    for r in stages:
        print(f"  {r['stage']:>5} {r['tasks']:>5} {r['wall_s']:>7.1f} {r['task_s']:>7.1f} {r['cpu_s']:>7.1f} "
              f"{r['shuffle_write_mb']:>9.1f} {r['shuffle_read_mb']:>9.1f}  {r['name']}")


def tree_cpu_seconds(root: int) -> float:
    """User+system CPU seconds of a process and all its live descendants (Linux /proc):
    the JVM, its threads and the Python workers. Unlike wall time it does not grow when
    other processes compete for the cores."""
    parent, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return total


def check_once(path: str, master: str, log_dir: str | None = None) -> dict:
    """Run in a child process: check one trace as `kipcheck check` does (check_cmd's decode
    pass, then its Spark job), return timing, the (rule, seq) found and, with log_dir, the
    per-stage breakdown of Spark's event log."""
    spark = get_spark("kipcheck-check-bench", master, {**SPARK_CONF, **(event_log_conf(log_dir) if log_dir else {})})
    warm = spark.range(1000).selectExpr("sum(id)").collect()  # JVM and Python workers up before the clock
    del warm
    cpu0, started = tree_cpu_seconds(os.getpid()), time.perf_counter()
    scan = ScanStats()
    paths, _ = validate_segments(path, scan)
    vdf, stats, spark_input = run_spark(paths, scan, CheckConfig(), False, master, tempfile.mkdtemp(prefix="kipcheck-check-bench-"))
    found = [(r.rule_id, r.seq) for r in vdf.select("rule_id", "seq").collect()]
    seconds = time.perf_counter() - started
    cpu = tree_cpu_seconds(os.getpid()) - cpu0
    spark.stop()
    stages = stage_breakdown(log_dir) if log_dir else []
    return {"rows": stats["rows"], "seconds": seconds, "cpu_seconds": cpu, "found": sorted(found), "stages": stages,
            "spark_input": spark_input}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_for_result(args: list[str], root: str | None = None,
                   timeout: float | None = None) -> tuple[dict | None, subprocess.CompletedProcess]:
    """`python ARGS` in a child on the code of checkout `root` (default: this one): the JSON
    of its `RESULT ...` line (None when it printed none) and the finished process."""
    root = root or ROOT
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": root})
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), proc
    return None, proc


def run_child(path: str, master: str, root: str | None = None, log_dir: str | None = None) -> dict:
    """check_once in a child process, on the code of checkout `root` (default: this one)."""
    code = ("import json,sys; from benchmarks.trace_check_bench import check_once; "
            f"print('RESULT', json.dumps(check_once({path!r}, {master!r}, {log_dir!r})))")
    result, proc = run_for_result(["-c", code], root)
    if result is None:
        raise RuntimeError(f"check on {master} failed: {proc.stderr[-2000:]}")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trace_check_bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK} instead of {FULL}")
    p.add_argument("--sizes", help="comma-separated exchange counts (overrides the preset)")
    p.add_argument("--masters", default=",".join(MASTERS))
    p.add_argument("--dir", help="where to write the traces (default: a temporary directory)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    p.add_argument("--stages", action="store_true", help="print each run's per-stage breakdown (Spark event log)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(QUICK if args.quick else FULL)
    masters = args.masters.split(",")
    base = args.dir or tempfile.mkdtemp(prefix="kipcheck-check-bench-")
    results, ok = [], True
    print(f"{'exchanges':>11} {'master':9} {'gen s':>7} {'check s':>8} {'exchanges/s':>12} {'cpu s':>8} "
          f"{'cpu us/exch':>11}  found == injected")
    for n in sizes:
        path = os.path.join(base, f"trace-{n}")
        t0 = time.perf_counter()
        expected = sorted(tuple(x) for x in generate(path, n, seed=n % 9973))
        gen_s = time.perf_counter() - t0
        for master in masters:
            trace = path
            if master.startswith(V3_PREFIX):
                trace = path + ".v3"
                if not os.path.isdir(trace):
                    c = compact(path)
                    print(f"# compacted {n:,} exchanges in {c.seconds:.1f} s ({c.buckets} buckets, with the check's "
                          "event table)", flush=True)
            log_dir = tempfile.mkdtemp(prefix="kipcheck-events-") if args.stages else None
            r = run_child(trace, master.removeprefix(V3_PREFIX), log_dir=log_dir)
            exact = sorted(tuple(x) for x in r["found"]) == expected
            ok = ok and exact and r["rows"] == n
            rate = n / r["seconds"]
            results.append({"exchanges": n, "master": master, "gen_s": gen_s, "check_s": r["seconds"], "rate": rate,
                            "cpu_s": r["cpu_seconds"], "exact": exact, "injected": len(expected), "found": len(r["found"])})
            print(f"{n:>11} {master:9} {gen_s:>7.1f} {r['seconds']:>8.1f} {rate:>12,.0f} {r['cpu_seconds']:>8.1f} "
                  f"{r['cpu_seconds'] / n * 1e6:>11.1f}  {'yes' if exact else 'NO'} ({len(r['found'])}/{len(expected)})",
                  flush=True)
            if args.stages:
                print_stages(r["stages"])
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        for master in masters:
            a = next(r for r in results if r["exchanges"] == small and r["master"] == master)
            b = next(r for r in results if r["exchanges"] == large and r["master"] == master)
            growth = (b["check_s"] / a["check_s"]) / (large / small)
            print(f"growth {small:,} -> {large:,} on {master}: time x{b['check_s'] / a['check_s']:.1f} for "
                  f"x{large // small} exchanges (1.0 = linear: {growth:.2f})")
    print(f"machine: {os.cpu_count()} cpu(s), load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
