"""Capture-proxy cost (issue 13, item 4): throughput and added latency, direct vs proxied.

    python -m benchmarks.run --suite proxy [--quick] [--targets reference,kafka-native]
        [--messages N] [--value-bytes B] [--repeat R] [--json OUT]

Per target (started by `python -m targets.target_up SPEC` in its own process), the proxy
is `kipcheck record --writer W` (`python -m replay.record_cmd`, `--writer`: default auto,
i.e. the raw-frame spool decoded when the recording stops) in its own process, writing a
real Parquet trace. Each repetition runs every
workload directly and through the proxy, the order alternating between repetitions, so the
two sides of a ratio see the same machine load:

* produce: confluent-kafka `Producer` (acks=all, linger.ms=5), N values of B bytes; MB/s and
  msgs/s from the first `produce()` to the end of `flush()`;
* consume: `Consumer.assign()` from offset 0 of those N values to the last one;
* ApiVersions: M raw request/response round trips on one socket (`RawClient`); the
  proxy's own added latency with the least client noise;
* produce acks=1: one 100 B value in flight (linger.ms=0), `produce()` to its delivery report,
  the application waiting in `poll()`;
* Produce acks=1, raw: M raw Produce v9 round trips (acks=1, one 100 B record) on one socket;
* ApiVersions / Produce acks=1, raw, bare relay: the same round trips through
  benchmarks/bare_relay.py (asyncio, no decoding, no capture) instead of the proxy, measured
  in the same repetitions: the part of the added latency that any Python relay process on
  the path costs, so the proxy's own part is its row minus the floor's;
* produce acks=1 / produce / consume, bare relay (reference only): the confluent-kafka
  workloads through the bare relay in front of a second reference broker that advertises
  the relay's port (benchmarks/advertised_reference.py), so librdkafka's every connection
  takes the hop; "vs relay" is the capture's throughput over the relay's (issue 27's ratio
  against a bare relay), and the relay's own CPU per MB is the floor under the capture's.
A floor's direct side is the direct samples of the row it is under (for the last one, the
main broker's: same implementation, same settings).

Throughput cells are medians over the repetitions; latency percentiles pool every sample.
"capture CPU" is the CPU time (user + system) of the proxy process and its trace
writer child per MB of values (median over the proxied runs) or per round trip: the cost itself, which the
throughput ratio shows only once the machine has no CPU to spare. The spool writer decodes
when the recorder stops: that CPU (the recorder's whole-life CPU, from wait4, minus what it
had used before SIGTERM) is reported per MB of frames in the trace, apart.
The load average (1 min) is read after each row's last measurement: on the project's
shared 2-core machine broker, proxy, trace writer and client compete for CPU. "cores busy
d/p" is how many cores the whole machine kept busy during the direct / proxied runs
(median, /proc/stat): a ratio below the target with every core busy is the capture's CPU.
Targets: proxied >= 0.9 x direct throughput; added p50 <= 0.3 ms on the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import pyarrow.parquet as pq

from benchmarks.bench_clients import (aligned, cell, Background, api_versions_run, consume_run, create_topic, percentile,
                                      produce_ack_run, produce_run, raw_produce_run, start_target)
from benchmarks import advertised_reference, bare_relay

THROUGHPUT_TARGET = 0.9
CPU_MS_PER_MB_TARGET = 2.0  # issue 27: capture CPU per MB of values
ADDED_P50_TARGET_MS = 0.3
THROUGHPUT = ("produce", "consume")
LATENCY = ("ApiVersions", "produce acks=1", "Produce acks=1, raw")
# benchmarks/bare_relay.py in place of the proxy: the floor under each round-trip row
# (its direct side is that row's direct samples); a client library needs a broker that
# advertises the relay (reference only), raw round trips use the relay as it is
RELAY_FLOORS = {"ApiVersions, bare relay": "ApiVersions", "Produce acks=1, raw, bare relay": "Produce acks=1, raw"}
ADVERTISED_FLOORS = {"produce acks=1, bare relay": "produce acks=1", "produce, bare relay": "produce",
                     "consume, bare relay": "consume"}
FLOORS = {**RELAY_FLOORS, **ADVERTISED_FLOORS}


@dataclass
class Row:
    target: str
    workload: str
    direct: list[float] = field(default_factory=list)  # msgs/s per repetition, or ms per round trip
    proxied: list[float] = field(default_factory=list)
    value_bytes: int = 0
    n: int = 0
    load: float = 0.0
    proxy_cpu_s: list[float] = field(default_factory=list)  # proxy + writer CPU seconds per proxied run
    # cores the whole machine kept busy during each run (/proc/stat): a throughput ratio below
    # 1 on a machine with every core busy is the capture's CPU, not its forwarding path
    cores_busy: dict[str, list[float]] = field(default_factory=lambda: {"direct": [], "proxied": []})
    relay: float | None = None  # the bare relay's median throughput in the same repetitions

    @property
    def vs_relay(self) -> float | None:
        p = self.mid("proxied")
        return p / self.relay if self.relay and p is not None else None

    @property
    def cpu_ms_per_mb(self) -> float | None:
        """CPU the capture costs per MB of values forwarded (proxy and trace-writer
        processes): unlike throughput, hardly moved by the other load on the machine."""
        if not self.proxy_cpu_s or not self.value_bytes or self.latency:
            return None
        mb = self.n * self.value_bytes / 1e6
        return statistics.median(self.proxy_cpu_s) * 1000 / mb

    @property
    def cpu_us_per_request(self) -> float | None:
        """The same for a round-trip row: capture CPU per request/response pair."""
        if not self.proxy_cpu_s or not self.latency or not self.proxied:
            return None
        return sum(self.proxy_cpu_s) * 1e6 / len(self.proxied)

    @property
    def latency(self) -> bool:
        return self.workload in LATENCY or FLOORS.get(self.workload) in LATENCY

    def mid(self, side: str) -> float | None:
        v = getattr(self, side)
        return statistics.median(v) if v else None

    @property
    def ratio(self) -> float | None:
        d, p = self.mid("direct"), self.mid("proxied")
        return p / d if d and p is not None and not self.latency else None

    def pct(self, side: str, q: float) -> float | None:
        v = getattr(self, side)
        return percentile(v, q) if v else None

    @property
    def added_p50(self) -> float | None:
        d, p = self.pct("direct", 50), self.pct("proxied", 50)
        return None if d is None or p is None else p - d

    @property
    def met(self) -> bool | None:
        if self.workload in FLOORS:
            return None  # a floor to read the proxy's row against, not a target
        if self.latency:
            if self.added_p50 is None or not self.target.startswith("reference"):
                return None
            return self.added_p50 <= ADDED_P50_TARGET_MS
        if self.ratio is None:
            return None
        return self.ratio >= THROUGHPUT_TARGET and (self.cpu_ms_per_mb or 0) <= CPU_MS_PER_MB_TARGET

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ratio=self.ratio, added_p50_ms=self.added_p50, met=self.met, cpu_ms_per_mb=self.cpu_ms_per_mb,
                 vs_relay=self.vs_relay,
                 cpu_us_per_request=self.cpu_us_per_request)
        return d


# --- workloads -------------------------------------------------------------------------------


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        todo += [c for c, pp in parents.items() if pp == p]
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (Linux /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


def settle(pid: int, idle_s: float = 0.3, cap_s: float = 60.0) -> None:
    """Wait until the process tree (proxy and trace writer) stops using CPU: the writer
    drains its backlog after the clients are done, and that work belongs to the proxied
    run (its capture CPU), not to whichever run comes next (its cores busy)."""
    deadline = time.monotonic() + cap_s
    last = tree_cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(idle_s)
        now = tree_cpu_s(pid)
        if now - last < idle_s * 0.05:
            return
        last = now


def _measured(row: Row, mode: str, proxy_pid: int, run: Callable[[], Any]) -> Any:
    before = tree_cpu_s(proxy_pid) if mode == "proxied" else 0.0
    busy0, total0 = machine_cpu()
    result = run()
    busy1, total1 = machine_cpu()
    if total1 > total0:
        row.cores_busy[mode].append((busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1))
    if mode == "proxied":
        settle(proxy_pid)
        row.proxy_cpu_s.append(tree_cpu_s(proxy_pid) - before)
    return result


def _record(row: Row, mode: str, pid: int, run: Callable[[str], Any], address: str) -> None:
    """One measured run of `row` through `address`, kept on its `mode` side."""
    got = _measured(row, mode, pid, lambda: run(address))
    side = getattr(row, mode)
    if isinstance(got, list):
        side.extend(got)
    else:
        side.append(got)


# --- one target ---------------------------------------------------------------------------------


def start_proxy(upstream: str, trace_dir: str, writer: str = "auto") -> tuple[Background, str]:
    argv = [sys.executable, "-m", "replay.record_cmd", "--upstream", upstream.split(",")[0],
            "--listen", "127.0.0.1:0", "--out", trace_dir, "--writer", writer, "--no-compact"]
    bg = Background(argv, "kipcheck record: listening", 120)
    return bg, bg.line.split("listening ", 1)[1].split(" ", 1)[0].rstrip(";")


def start_relay(upstream: str, listen: int = 0) -> tuple[Background, str]:
    argv = [sys.executable, "-m", "benchmarks.bare_relay", upstream.split(",")[0], "--listen", str(listen)]
    bg = Background(argv, bare_relay.READY, 60)
    return bg, bg.line.split(bare_relay.READY, 1)[1].strip()


def start_advertised_relay() -> tuple[list[Background], str]:
    """A reference broker advertising a bare relay's port, and the relay in front of it:
    the relay's address, which a client library cannot go around."""
    with socket.socket() as s:  # a free port for the relay, known before the broker starts
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    broker = Background([sys.executable, "-m", "benchmarks.advertised_reference", str(port)],
                        advertised_reference.READY, 120)
    try:
        relay, address = start_relay(broker.line.split(advertised_reference.READY, 1)[1], listen=port)
    except Exception:
        broker.stop()
        raise
    return [relay, broker], address


def stop_measured(bg: Background) -> float:
    """SIGTERM, and the CPU seconds the process tree used from SIGTERM to its exit (the
    spool's decode): wait4's rusage covers the process and its reaped children."""
    before = tree_cpu_s(bg.proc.pid)
    bg.proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(bg.proc.pid, 0)
    bg.proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime - before


def trace_counts(trace_dir: str) -> tuple[str, float]:
    """Exchange rows and exchanges lost to gaps in the recorded trace (a proxy that keeps
    pace by dropping rows would not be cheap, only incomplete), and the MB of frames in it."""
    files = [os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.endswith(".parquet")]
    if not files:
        return "no trace segment", 0.0
    t = pq.ParquetDataset(files).read(columns=["kind", "gap_count", "request_size", "response_size"]).to_pydict()
    gaps = sum(c or 0 for k, c in zip(t["kind"], t["gap_count"]) if k == "gap")
    mb = (sum(x or 0 for x in t["request_size"]) + sum(x or 0 for x in t["response_size"])) / 1e6
    return f"trace: {t['kind'].count('exchange')} exchange rows, {gaps} exchange(s) in gaps, {mb:.1f} MB of frames", mb


def bench_target(spec: str, n: int, m: int, value_bytes: int, repeat: int, log: Callable[[str], None],
                 notes: list[str], writer: str = "auto") -> list[Row]:
    target, bootstrap = start_target(spec)
    trace_dir = tempfile.mkdtemp(prefix="kipcheck-proxy-bench-")
    value = b"v" * value_bytes
    advertise = spec.split(":")[0] == "reference"
    floors = {**RELAY_FLOORS, **(ADVERTISED_FLOORS if advertise else {})}
    rows = {w: Row(spec, w, value_bytes=value_bytes if w in THROUGHPUT or floors.get(w) in THROUGHPUT else 0, n=n)
            for w in THROUGHPUT + LATENCY + tuple(floors)}

    def workloads(topic: str) -> dict[str, Callable[[str], Any]]:
        """row -> its run on one bootstrap address: a rate or round-trip samples"""
        return {"produce": lambda b: produce_run(b, topic, n, value),
                "consume": lambda b: consume_run(b, topic, n),
                "ApiVersions": lambda b: api_versions_run(b, m),
                "produce acks=1": lambda b: produce_ack_run(b, topic, m),
                "Produce acks=1, raw": lambda b: raw_produce_run(b, topic, m)}

    try:
        proxy, proxied = start_proxy(bootstrap, trace_dir, writer)
        relay, relayed = start_relay(bootstrap)
        advertised: list[Background] = []
        decode_cpu = None
        try:
            if advertise:
                advertised, advertised_relay = start_advertised_relay()
            for r in range(repeat):
                order = [("direct", bootstrap), ("proxied", proxied)]
                for mode, bs in order if r % 2 == 0 else order[::-1]:
                    work = workloads(create_topic(bootstrap))
                    for name, run in work.items():
                        _record(rows[name], mode, proxy.proc.pid, run, bs)
                    if mode == "proxied":
                        for name, of in RELAY_FLOORS.items():
                            _record(rows[name], mode, relay.proc.pid, work[of], relayed)
                        on_advertised = workloads(create_topic(advertised_relay)) if advertise else {}
                        for name, of in ADVERTISED_FLOORS.items() if advertise else ():
                            _record(rows[name], mode, advertised[0].proc.pid, on_advertised[of], advertised_relay)
                    log(f"  {spec} repeat {r + 1} {mode}: produce {rows['produce'].__dict__[mode][-1]:.0f}/s, "
                        f"consume {rows['consume'].__dict__[mode][-1]:.0f}/s, load {os.getloadavg()[0]:.2f}")
            for name, of in floors.items():  # the same direct samples as the row the floor is under
                rows[name].direct = list(rows[of].direct)
                rows[of].relay = rows[name].mid("proxied") if of in THROUGHPUT else None
            for row in rows.values():
                row.load = os.getloadavg()[0]
            decode_cpu = stop_measured(proxy)
        finally:
            for bg in [proxy, relay, *advertised]:
                bg.stop()
        counts, mb = trace_counts(trace_dir)
        notes.append(f"{spec}: {counts}")
        if decode_cpu is not None and mb:
            notes.append(f"{spec}: after the runs, the recorder used {decode_cpu:.1f} CPU s from SIGTERM to exit "
                         f"(decode of the spool, if any): {decode_cpu * 1000 / mb:.1f} ms per MB of frames")
    finally:
        target.stop()
        shutil.rmtree(trace_dir, ignore_errors=True)
    return list(rows.values())


# --- output ------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    head = ("target", "workload", "direct", "proxied", "ratio", "vs relay", "capture CPU", "cores busy d/p",
            "direct p50/p99 ms",
            "proxied p50/p99 ms", "added p50 ms", "load 1m", "met")
    lines = [head]
    for r in rows:
        if r.latency:
            cells = ("-", "-", "-", "-", f"{cell(r.cpu_us_per_request, '.0f')} us/req", f"{cell(r.pct('direct', 50), '.3f')}/{cell(r.pct('direct', 99), '.3f')}",
                     f"{cell(r.pct('proxied', 50), '.3f')}/{cell(r.pct('proxied', 99), '.3f')}", cell(r.added_p50, "+.3f"))
        else:
            mb = r.value_bytes / 1e6

            def fmt(v: float | None) -> str:
                return "-" if v is None else f"{v:.0f} msg/s {v * mb:.1f} MB/s"

            cells = (fmt(r.mid("direct")), fmt(r.mid("proxied")), cell(r.ratio, ".2f"), cell(r.vs_relay, ".2f"),
                     f"{cell(r.cpu_ms_per_mb, '.2f')} ms/MB", "-", "-", "-")
        busy = "/".join(cell(statistics.median(v) if v else None, ".2f") for v in r.cores_busy.values())
        cells = (*cells[:5], busy, *cells[5:])
        lines.append((r.target, r.workload, *cells, f"{r.load:.2f}", {True: "yes", False: "NO", None: "-"}[r.met]))
    return aligned(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run --suite proxy", description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="reference,kafka-native", help="comma-separated target specs")
    ap.add_argument("--quick", action="store_true", help="20k values, 300 round trips, 2 repetitions")
    ap.add_argument("--messages", type=int, help="values per throughput run (default 200000)")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--latency-messages", type=int, help="round trips per run (default 2000)")
    ap.add_argument("--repeat", type=int, help="repetitions per side (default 3)")
    ap.add_argument("--writer", default="auto", choices=("auto", "spool", "thread", "process"),
                    help="kipcheck record --writer (default auto: the raw-frame spool)")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    a = ap.parse_args(argv)
    n = a.messages or (20000 if a.quick else 200000)
    m = a.latency_messages or (300 if a.quick else 2000)
    repeat = a.repeat or (2 if a.quick else 3)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    rows: list[Row] = []
    failures: list[str] = []
    notes: list[str] = []
    started = time.monotonic()
    for spec in [s.strip() for s in a.targets.split(",") if s.strip()]:
        log(f"benchmarking {spec} ...")
        try:
            rows += bench_target(spec, n, m, a.value_bytes, repeat, log, notes, a.writer)
        except Exception as exc:  # noqa: BLE001 - one target failing does not hide the others
            failures.append(f"{spec}: {exc}")
    print(table(rows))
    print(f"\ntargets: proxied throughput >= {THROUGHPUT_TARGET}x direct and capture CPU <= {CPU_MS_PER_MB_TARGET} ms/MB, "
          f"added p50 <= {ADDED_P50_TARGET_MS} ms "
          f"(reference); {n} x {a.value_bytes} B x {repeat} repetition(s), {m * repeat} round trips per latency cell; "
          f"{time.monotonic() - started:.0f} s")
    missed = [f"{r.target}/{r.workload}" for r in rows if r.met is False]
    print(f"NOT met: {', '.join(missed)}" if missed else "all targets met" if rows else "no results")
    for note in notes:
        print(note)
    for f in failures:
        print(f"failed: {f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"benchmark": "kipcheck-proxy-bench", "schema_version": 1, "cpus": os.cpu_count(),
                       "settings": {"messages": n, "value_bytes": a.value_bytes, "latency_messages": m,
                                    "repeat": repeat, "writer": a.writer}, "failures": failures, "notes": notes, "rows": [r.as_dict() for r in rows]},
                      fh, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
