"""kipcheck benchmarks: ``python -m benchmarks.run [--suite NAME|all] [--quick] [--json OUT]``.

Suites (each prints its own table):
  broker       (default) the embedded reference broker: starts a ThreadedReferenceCluster on
               loopback, runs every measurement of benchmarks/reference_broker.py against it
               (each bounded by a count and a time budget);
  proxy        capture-proxy overhead against direct connections (benchmarks/proxy_bench.py);
  trace-check  `kipcheck check` throughput on synthetic traces, Spark local[1]/local[2]
               (benchmarks/trace_check_bench.py);
  trace-diff   `kipcheck diff` throughput, Spark vs the DuckDB baseline (benchmarks/trace_diff_bench.py);
  trace        one table: check and diff on pure / DuckDB (diff) / local[1] / local[2] (/ standalone,
               --standalone), 100k and 1M exchanges (10M: --with-10m; 100M on the cluster:
               --cluster-100m), fixed cost at 200, and the capture rows (direct, bare relay,
               kipcheck record: ratios, CPU per MB), with the load (benchmarks/trace_bench.py);
  certify      `kipcheck certify` wall time per target and worker count, side by side
               (benchmarks/certify_bench.py; not part of `all`: minutes per row);
  txnrt        round trips and latency per transaction with and without the draft round-trip
               KIP (blocking add, pre-registration) on the reference (benchmarks/txnrt_bench.py);
  all          every suite above, one after the other.
Stops by itself.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import confluent_kafka

# (messages per produce/consume measurement, end-to-end messages, ApiVersions requests,
#  time budget per measurement in seconds)
FULL = {"messages": 50_000, "e2e_messages": 2_000, "requests": 5_000, "budget_s": 60.0}
QUICK = {"messages": 10_000, "e2e_messages": 500, "requests": 1_000, "budget_s": 8.0}
VALUE_SIZES = (100, 1024)
COMPRESSIONS = ("none", "lz4")

COLUMNS = ("measurement", "config", "done", "time s", "msgs/s", "MB/s", "p50 ms", "p99 ms", "peak RSS MiB")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run [--suite broker]",
        description="Throughput, latency and memory of the embedded reference broker (loopback, one process). "
        "Other suites: --suite proxy | trace-check | trace-diff | trace | all.",
    )
    p.add_argument("--quick", action="store_true",
                   help=f"small counts ({QUICK['messages']} messages, {QUICK['e2e_messages']} latency samples, "
                        f"{QUICK['requests']} requests, {QUICK['budget_s']:.0f} s per measurement at most)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.add_argument("--messages", type=int, help="messages per produce/consume measurement (overrides the preset)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="time budget per measurement (overrides the preset)")
    p.add_argument("--brokers", type=int, default=1, help="reference broker nodes (default 1)")
    p.add_argument("--partitions", type=int, default=1, help="partitions of the produce/consume topics (default 1)")
    p.add_argument("--keep-topics", action="store_true",
                   help="keep each throughput topic after it was consumed (default: delete it, so that the broker "
                        "holds one topic's records at a time and memory stays bounded)")
    args = p.parse_args(argv)
    for name in ("messages", "brokers", "partitions"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name} must be at least 1")
    if args.budget is not None and args.budget <= 0:
        p.error("--budget must be positive")
    return args


def environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()[0]),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import reference_broker as rb  # broker suite only: ~1 s of import the others skip
    from reference_impl.server.broker_server import ThreadedReferenceCluster  # broker suite only (see the line above)

    preset = dict(QUICK if args.quick else FULL)
    if args.messages:
        preset["messages"] = args.messages
    if args.budget:
        preset["budget_s"] = args.budget
    budget = preset["budget_s"]
    rows: list[rb.Measurement] = []
    failures = 0

    def measure(label: str, fn: Callable[[], rb.Measurement], fallback: rb.Measurement) -> rb.Measurement:
        nonlocal failures
        print(f"  {label} ...", file=sys.stderr, flush=True)
        try:
            m = fn()
        except Exception as exc:  # keep going: one broken measurement should not hide the others
            failures += 1
            traceback.print_exc(file=sys.stderr)
            m = fallback
            m.note = f"failed: {type(exc).__name__}: {exc}"
        m.peak_rss_mib = rb.peak_rss_mib()
        rows.append(m)
        return m

    started = time.perf_counter()
    rss_before = rb.peak_rss_mib()
    cluster = ThreadedReferenceCluster(brokers=args.brokers, host="127.0.0.1", port=0)
    cluster.start()
    try:
        bootstrap = cluster.bootstrap_servers
        rss_started = rb.peak_rss_mib()
        print(f"reference broker up at {bootstrap}", file=sys.stderr, flush=True)
        for pre_encoded in (False, True):
            measure(
                f"ApiVersions round trip ({'pre-encoded' if pre_encoded else 'encode + decode'})",
                lambda pe=pre_encoded: rb.api_versions_round_trip(
                    bootstrap, requests=preset["requests"], budget_s=budget, pre_encoded=pe),
                rb.Measurement("ApiVersions round trip", "v3", preset["requests"]),
            )
        for size in VALUE_SIZES:
            for codec in COMPRESSIONS:
                topic = rb.unique_topic(f"{size}-{codec}")
                config = f"{size} B, {codec}"
                produced = measure(
                    f"produce {config}",
                    lambda t=topic, s=size, c=codec: _produce(rb, bootstrap, t, args.partitions, preset["messages"], s, c, budget),
                    rb.Measurement("produce", config, preset["messages"]),
                )
                if not produced.count:
                    rows.append(rb.Measurement("consume", config, 0, note="skipped: nothing was produced"))
                    continue
                measure(
                    f"consume {config}",
                    lambda t=topic, s=size, c=codec, n=produced.count: rb.consume_throughput(
                        bootstrap, t, partitions=args.partitions, expected=n, value_size=s, compression=c, budget_s=budget),
                    rb.Measurement("consume", config, produced.count),
                )
                if not args.keep_topics:
                    try:
                        rb.delete_topic(bootstrap, topic)
                    except Exception as exc:  # noqa: BLE001 - memory then grows; the numbers still stand
                        print(f"  could not delete {topic}: {exc}", file=sys.stderr)
        e2e_topic = rb.unique_topic("e2e")
        measure(
            "end-to-end latency",
            lambda: _e2e(rb, bootstrap, e2e_topic, preset["e2e_messages"], budget),
            rb.Measurement("end-to-end latency", "100 B", preset["e2e_messages"]),
        )
    finally:
        cluster.stop()
    return {
        "benchmark": "kipcheck-reference-broker",
        "schema_version": 1,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "mode": "quick" if args.quick else "full",
        "environment": environment(),
        "broker": {"kind": "reference (ThreadedReferenceCluster, in this process)", "nodes": args.brokers,
                   "partitions": args.partitions, "topics_kept": bool(args.keep_topics)},
        "preset": preset,
        "peak_rss_mib": {"before_start": rss_before, "after_start": rss_started, "end": rb.peak_rss_mib()},
        "wall_time_s": round(time.perf_counter() - started, 2),
        "failures": failures,
        "measurements": [m.as_dict() for m in rows],
    }


def _produce(rb: Any, bootstrap: str, topic: str, partitions: int, messages: int, size: int, codec: str, budget: float):
    rb.create_topic(bootstrap, topic, partitions)
    return rb.produce_throughput(bootstrap, topic, messages=messages, value_size=size, compression=codec,
                                 budget_s=budget, flush_timeout_s=max(5.0, budget))


def _e2e(rb: Any, bootstrap: str, topic: str, messages: int, budget: float):
    rb.create_topic(bootstrap, topic, 1)
    return rb.end_to_end_latency(bootstrap, topic, messages=messages, value_size=100, budget_s=budget)


# ---------------------------------------------------------------------------------
# output


def _num(v: Any, digits: int) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def table_lines(result: dict[str, Any]) -> list[str]:
    env = result["environment"]
    rss = result["peak_rss_mib"]
    lines = [
        f"kipcheck reference broker benchmark ({result['mode']}): {result['broker']['nodes']} node(s), "
        f"{result['broker']['partitions']} partition(s) per throughput topic, loopback, one process",
        f"confluent-kafka {env['confluent_kafka']} (librdkafka {env['librdkafka']}), Python {env['python']}, "
        f"{env['cpus']} CPU(s), {env['platform']}",
        "",
    ]
    table = [list(COLUMNS)]
    notes = []
    for m in result["measurements"]:
        done = f"{m['count']:,}/{m['requested']:,}" + (" (time cap)" if m["capped"] else "")
        table.append(
            [
                m["name"],
                m["config"],
                done,
                _num(m["seconds"], 2) if m["seconds"] else "—",
                _num(m["msgs_per_s"], 0),
                _num(m["mb_per_s"], 2),
                _num(m["p50_ms"], 3),
                _num(m["p99_ms"], 3),
                _num(m["peak_rss_mib"], 1),
            ]
        )
        if m["note"]:
            notes.append(f"{m['name']} {m['config']}: {m['note']}")
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    right = {2, 3, 4, 5, 6, 7, 8}
    for n, r in enumerate(table):
        lines.append("  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [
        "",
        f"peak RSS (whole process: broker + clients): {rss['before_start']} MiB before the broker started, "
        f"{rss['after_start']} MiB after, {rss['end']} MiB at the end"
        + ("" if result["broker"]["topics_kept"] else " (each throughput topic deleted after it was consumed)")
        + f"; wall time {result['wall_time_s']} s",
        "produce: acks=all, linger.ms=5; msgs/s counts acknowledged messages, MB/s their value bytes (10^6 B);"
        " consume: assign() from offset 0, clock starts at assign();"
        " end-to-end: acks=all, linger.ms=0, one message in flight;"
        " ApiVersions: one connection, one request in flight.",
    ]
    lines += [f"note: {n}" for n in notes]
    return lines


# suite name -> module with `main(argv) -> int` (each takes --quick and --json OUT)
OTHER_SUITES = {
    "proxy": "benchmarks.proxy_bench",
    "trace-check": "benchmarks.trace_check_bench",
    "trace-diff": "benchmarks.trace_diff_bench",
    "trace": "benchmarks.trace_bench",
    "certify": "benchmarks.certify_bench",
    "txnrt": "benchmarks.txnrt_bench",
}
SUITES = ("broker", *OTHER_SUITES, "all")


def _split_suite(argv: list[str]) -> tuple[str, list[str]]:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--suite", choices=SUITES, default="broker")
    known, rest = p.parse_known_args(argv)
    return known.suite, rest


def _common_args(rest: list[str], suite: str | None = None) -> list[str]:
    """--quick and --json OUT, the options every suite takes; with `suite`, OUT gets the
    suite's name as a suffix so that `--suite all` writes one file per suite."""
    args = ["--quick"] if "--quick" in rest else []
    if "--json" in rest and rest.index("--json") + 1 < len(rest):
        out = Path(rest[rest.index("--json") + 1])
        if suite is not None:
            out = out.with_name(f"{out.stem}-{suite}{out.suffix or '.json'}")
        args += ["--json", str(out)]
    return args


def _run_other(suite: str, args: list[str]) -> int:
    print(f"== benchmark suite: {suite}", flush=True)
    return int(importlib.import_module(OTHER_SUITES[suite]).main(args) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    suite, rest = _split_suite(argv)
    if suite in OTHER_SUITES:
        return _run_other(suite, rest)  # every option goes to that suite
    if suite == "all":
        codes = [_broker_main(_common_args(rest))] + [_run_other(name, _common_args(rest, name))
                                                      for name in OTHER_SUITES if name not in ("certify", "trace")]
        return max(codes)
    return _broker_main(rest)


def _broker_main(argv: list[str]) -> int:
    args = parse_args(argv)
    result = run(args)
    print("\n".join(table_lines(result)))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"results written to {out}", file=sys.stderr)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
