"""Capture-proxy overhead: confluent-kafka throughput and latency, direct vs through the proxy.

    .venv/bin/python -m benchmarks.proxy_overhead [--quick] [--targets reference,kafka-native] [--json OUT]

For each target (started with `python -m targets.target_up SPEC` in its own process) the
capture proxy (`python -m replay.record_cmd --writer W`) runs in its own process with the
trace written to a temporary directory, per writer placement (`--writers`): `spool` (raw
frames spooled by a thread, decoded when the recording stops: replay/capture_spool.py),
`thread` (TraceWriter decoding in a thread of the proxy process), `process` (the writer in a
child process, `replay.proxy.ProcessTraceSink`). Three workloads run
twice, directly against the broker and through the proxy, alternating, `--repeat` times:

* produce: `Producer` (acks=all, linger.ms=5), N messages of 100 B; msgs/s from the first
  `produce()` to the end of `flush()`;
* consume: `Consumer` with `assign()` from offset 0 of those N messages; msgs/s from
  `assign()` to the last message;
* produce round trip: one 100 B message in flight (linger.ms=0, acks=all), `produce()` to
  its delivery report; p50/p99 over M messages.

Throughputs are medians over the repeats; latency percentiles pool every repeat's samples.
Targets (issue 13, the same constants as benchmarks/proxy_bench.py): proxied throughput
>= 0.9 x direct, added p50 <= 0.3 ms on the reference. Each process is
separate (broker, proxy, clients), as in a real deployment; on a shared 2-core machine the
proxy competes with the broker and the clients for CPU, which a real deployment would not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import confluent_kafka

from benchmarks.proxy_bench import ADDED_P50_TARGET_MS, THROUGHPUT_TARGET
from benchmarks.bench_clients import (aligned, cell, Background, consume_run, create_topic, percentile, produce_ack_run,
                                      produce_run, start_target)

VALUE = b"x" * 100


@dataclass
class Row:
    target: str
    writer: str  # kipcheck record --writer: spool, thread or process
    workload: str
    direct_msgs_s: float | None = None
    proxied_msgs_s: float | None = None
    direct_p50_ms: float | None = None
    direct_p99_ms: float | None = None
    proxied_p50_ms: float | None = None
    proxied_p99_ms: float | None = None
    note: str = ""
    samples: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.direct_msgs_s and self.proxied_msgs_s is not None:
            return self.proxied_msgs_s / self.direct_msgs_s
        return None

    @property
    def added_p99_ms(self) -> float | None:
        if self.direct_p99_ms is None or self.proxied_p99_ms is None:
            return None
        return self.proxied_p99_ms - self.direct_p99_ms

    @property
    def added_p50_ms(self) -> float | None:
        if self.direct_p50_ms is None or self.proxied_p50_ms is None:
            return None
        return self.proxied_p50_ms - self.direct_p50_ms

    @property
    def met(self) -> bool | None:
        if self.workload == "produce round trip":
            if self.added_p50_ms is None or not self.target.startswith("reference"):
                return None
            return self.added_p50_ms <= ADDED_P50_TARGET_MS
        return None if self.ratio is None else self.ratio >= THROUGHPUT_TARGET

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ratio=self.ratio, added_p50_ms=self.added_p50_ms, added_p99_ms=self.added_p99_ms, met=self.met)
        return d


# --- processes -------------------------------------------------------------------------------


def start_proxy(upstream: str, trace_dir: str, writer: str) -> tuple[Background, str]:
    """`kipcheck record --writer WRITER` in front of `upstream` (no compaction at the end)."""
    argv = [sys.executable, "-m", "replay.record_cmd", "--upstream", upstream.split(",")[0], "--listen",
            "127.0.0.1:0", "--out", trace_dir, "--writer", writer, "--no-compact"]
    bg = Background(argv, "kipcheck record: listening", 60)
    return bg, bg.line.split("listening ", 1)[1].split(" ", 1)[0]


# --- workloads -------------------------------------------------------------------------------


# --- one target ---------------------------------------------------------------------------------


def bench_target(spec: str, writers: list[str], n: int, m: int, repeat: int, log) -> list[Row]:
    target, bootstrap = start_target(spec)
    try:
        out: list[Row] = []
        for writer in writers:
            out += bench_proxy(spec, bootstrap, writer, n, m, repeat, log)
        return out
    finally:
        target.stop()


def bench_proxy(spec: str, bootstrap: str, writer: str, n: int, m: int, repeat: int, log) -> list[Row]:
    trace_dir = tempfile.mkdtemp(prefix="kipcheck-bench-trace-")
    try:
        proxy, proxied = start_proxy(bootstrap, trace_dir, writer)
        try:
            rows = {w: Row(spec, writer, w) for w in ("produce", "consume", "produce round trip")}
            thr: dict[tuple[str, str], list[float]] = {}
            lat: dict[str, list[float]] = {"direct": [], "proxied": []}
            for r in range(repeat):
                order = [("direct", bootstrap), ("proxied", proxied)]
                if r % 2:
                    order.reverse()
                for mode, bs in order:
                    topic = create_topic(bootstrap)
                    thr.setdefault(("produce", mode), []).append(produce_run(bs, topic, n, VALUE))
                    thr.setdefault(("consume", mode), []).append(consume_run(bs, topic, n))
                    lat[mode] += produce_ack_run(bs, topic, m, acks="all")
                    log(f"  {spec} ({writer} writer) repeat {r + 1} {mode}: produce {thr[('produce', mode)][-1]:.0f}/s, "
                        f"consume {thr[('consume', mode)][-1]:.0f}/s")
            for w in ("produce", "consume"):
                row = rows[w]
                row.direct_msgs_s = statistics.median(thr[(w, "direct")])
                row.proxied_msgs_s = statistics.median(thr[(w, "proxied")])
                row.samples = {"direct": thr[(w, "direct")], "proxied": thr[(w, "proxied")]}
            row = rows["produce round trip"]
            row.direct_msgs_s = 1000 / statistics.mean(lat["direct"])
            row.proxied_msgs_s = 1000 / statistics.mean(lat["proxied"])
            row.direct_p50_ms, row.direct_p99_ms = percentile(lat["direct"], 50), percentile(lat["direct"], 99)
            row.proxied_p50_ms, row.proxied_p99_ms = percentile(lat["proxied"], 50), percentile(lat["proxied"], 99)
            row.samples = {"n": len(lat["direct"])}
        finally:
            proxy.stop()
        trace_bytes = sum(os.path.getsize(os.path.join(trace_dir, f)) for f in os.listdir(trace_dir))
        for row in rows.values():
            row.note = f"trace {trace_bytes / 1e6:.1f} MB"
        return list(rows.values())
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)


# --- output ------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    head = ("target", "writer", "workload", "direct msgs/s", "proxied msgs/s", "ratio", "direct p50/p99 ms",
            "proxied p50/p99 ms", "added p50/p99 ms", "met")
    lines = [head]
    for r in rows:
        lat = r.workload == "produce round trip"
        lines.append((r.target, r.writer, r.workload, cell(r.direct_msgs_s, ".0f"), cell(r.proxied_msgs_s, ".0f"),
                      cell(r.ratio, ".2f"),
                      f"{cell(r.direct_p50_ms, '.2f')}/{cell(r.direct_p99_ms, '.2f')}" if lat else "-",
                      f"{cell(r.proxied_p50_ms, '.2f')}/{cell(r.proxied_p99_ms, '.2f')}" if lat else "-",
                      f"{cell(r.added_p50_ms, '+.2f')}/{cell(r.added_p99_ms, '+.2f')}" if lat else "-",
                      {True: "yes", False: "NO", None: "-"}[r.met]))
    return aligned(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.proxy_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="reference,kafka-native", help="comma-separated target specs")
    ap.add_argument("--quick", action="store_true", help="fewer messages, one repeat")
    ap.add_argument("--messages", type=int, help="messages per throughput run (default 50000, quick 10000)")
    ap.add_argument("--latency-messages", type=int, help="round trips per run (default 1000, quick 200)")
    ap.add_argument("--repeat", type=int, help="runs per mode (default 3, quick 1)")
    ap.add_argument("--writers", default="spool,thread,process",
                    help="trace writer placements to measure (kipcheck record --writer): spool, thread, process")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    a = ap.parse_args(argv)
    writers = [w.strip() for w in a.writers.split(",") if w.strip()]
    if not writers or set(writers) - {"spool", "thread", "process"}:
        ap.error("--writers takes spool, thread and/or process")
    n = a.messages or (10000 if a.quick else 50000)
    m = a.latency_messages or (200 if a.quick else 1000)
    repeat = a.repeat or (1 if a.quick else 3)
    rows: list[Row] = []
    failures: list[str] = []
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    for spec in [s.strip() for s in a.targets.split(",") if s.strip()]:
        log(f"benchmarking {spec} ...")
        try:
            rows += bench_target(spec, writers, n, m, repeat, log)
        except Exception as exc:  # noqa: BLE001 - one target failing does not hide the others
            failures.append(f"{spec}: {exc}")
    print(table(rows))
    print(f"\nissue targets: proxied throughput >= {THROUGHPUT_TARGET}x direct, added p50 <= {ADDED_P50_TARGET_MS} ms (reference); "
          f"{n} msgs x {repeat} repeat(s) per throughput cell, {m * repeat} round trips per latency cell")
    missed = [r for r in rows if r.met is False]
    print("all targets met" if rows and not missed else
          f"NOT met: {', '.join(f'{r.target}/{r.writer}/{r.workload}' for r in missed)}" if missed else "no results")
    for f in failures:
        print(f"failed: {f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"benchmark": "kipcheck-proxy-overhead", "schema_version": 1,
                       "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "environment": {"python": platform.python_version(), "platform": platform.platform(),
                                       "cpus": os.cpu_count(), "confluent_kafka": confluent_kafka.version()[0],
                                       "librdkafka": confluent_kafka.libversion()[0]},
                       "settings": {"messages": n, "latency_messages": m, "repeat": repeat, "value_bytes": len(VALUE)},
                       "targets_met": bool(rows) and not missed, "wall_time_s": time.monotonic() - started,
                       "failures": failures, "rows": [r.as_dict() for r in rows]}, fh, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
