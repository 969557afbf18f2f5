"""`kipcheck compact` of one trace, with its peak disk: ``python -m benchmarks.compact_bench TRACE [--buckets N]``.

Compaction's limit on one machine is temporary disk, not only time (docs/trace-checks.md,
"100M"): this samples the size of the output directory, staging and DuckDB's spill included
(they live inside it), every 2 s while `replay.compact.compact` runs, and prints seconds,
exchanges per second, the peak and when it came, the output's size and the process's peak
RSS (DuckDB runs in-process). benchmarks.trace_bench reports its compaction rows with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

from replay.compact import DEFAULT_BUCKETS, compact
from replay.trace_reader import TraceError

SAMPLE_S = 2.0


def tree_bytes(path: str) -> int:
    """Bytes of every file under `path` (files that vanish while walked count 0)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total


def measure(trace: str, out: str | None = None, buckets: int = DEFAULT_BUCKETS) -> dict:
    """Compact `trace` into `out` (default TRACE.v3) while sampling the output directory."""
    out = out or trace.rstrip("/") + ".v3"
    peak, done = {"bytes": 0, "at_s": 0.0}, threading.Event()
    started = time.perf_counter()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            size = tree_bytes(out)
            if size > peak["bytes"]:
                peak.update(bytes=size, at_s=time.perf_counter() - started)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = compact(trace, out, buckets=buckets)
    finally:
        done.set()
        sampler.join()
    return {"exchanges": result.exchanges, "rows": result.rows, "buckets": result.buckets,
            "seconds": round(result.seconds, 1), "rate": round(result.exchanges / result.seconds),
            "peak_disk_gb": round(peak["bytes"] / 1e9, 2), "peak_at_s": round(peak["at_s"], 1),
            "input_gb": round(tree_bytes(trace) / 1e9, 2), "output_gb": round(tree_bytes(out) / 1e9, 2),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
            "load1": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compact_bench", description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--out", help="default TRACE.v3 (must not exist or be empty)")
    p.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS)
    a = p.parse_args(argv)
    try:
        r = measure(a.trace, a.out, a.buckets)
    except (TraceError, ValueError) as exc:
        print(f"compact_bench: {exc}", file=sys.stderr)
        return 2
    print(f"compacted {r['exchanges']:,} exchanges into {r['buckets']} buckets in {r['seconds']} s ({r['rate']:,}/s); "
          f"peak disk {r['peak_disk_gb']} GB at {r['peak_at_s']} s (input {r['input_gb']} GB, output {r['output_gb']} GB); "
          f"peak RSS {r['peak_rss_gb']} GB; load1 {r['load1']}")
    print("RESULT " + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
