"""`kipcheck record`: run the capture proxy and write a Parquet trace until interrupted.

Entry: `record(upstream, listen, out_dir, payloads="keep") -> int` (exit status).

`writer`: "thread" (default) writes the trace from a thread of this process; "process"
writes it from a child process (`ProcessTraceSink`), which keeps the writer's decoding and
Parquet encoding off the forwarding path's GIL: lower added latency, at the cost of
pickling every frame (see benchmarks/proxy_overhead.py and docs/traces.md).
Prints one line ``kipcheck record: listening <bootstrap> -> <upstream>`` once ready, so a
caller (or a test) can point clients at the proxy.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from replay.proxy import CaptureProxy, ProcessTraceSink
from replay.trace_writer import PAYLOAD_MODES, TraceWriter


async def _run(upstream: str, listen: str, out_dir: str, payloads: str, segment_max_bytes: int,
               segment_max_seconds: float, advertised_host: str | None = None,
               stop: asyncio.Event | None = None, writer_kind: str = "thread") -> int:
    sink = ProcessTraceSink if writer_kind == "process" else TraceWriter
    writer = sink(out_dir, payloads, segment_max_bytes=segment_max_bytes,
                  segment_max_seconds=segment_max_seconds).start()
    proxy = CaptureProxy(upstream, listen, writer, advertised_host=advertised_host)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await proxy.start()
        print(f"kipcheck record: listening {proxy.bootstrap_servers} -> {upstream}; trace in {out_dir}", flush=True)
        await stop.wait()
    finally:
        await proxy.stop()
        await loop.run_in_executor(None, writer.close)
        s = writer.stats
        print(f"kipcheck record: {s['exchanges']} exchange(s), {s['gaps']} gap row(s) "
              f"({s['gap_exchanges']} exchange(s) not recorded), {s['segments']} segment(s); "
              f"back-pressure waits {proxy.stats.backpressure_waits}", flush=True)
    return 0 if writer.stats["write_errors"] == 0 else 1


WRITERS = ("thread", "process")


def record(upstream: str, listen: str, out_dir: str, payloads: str = "keep", *,
           segment_max_bytes: int = 64 << 20, segment_max_seconds: float = 60.0,
           advertised_host: str | None = None, writer: str = "thread") -> int:
    if payloads not in PAYLOAD_MODES:
        print(f"kipcheck record: --payloads must be one of {', '.join(PAYLOAD_MODES)}", file=sys.stderr)
        return 2
    if writer not in WRITERS:
        print(f"kipcheck record: --writer must be one of {', '.join(WRITERS)}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(upstream, listen, out_dir, payloads, segment_max_bytes, segment_max_seconds,
                                advertised_host, writer_kind=writer))
    except OSError as exc:
        print(f"kipcheck record: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="kipcheck record")
    p.add_argument("--upstream", required=True)
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--out", required=True)
    p.add_argument("--payloads", choices=PAYLOAD_MODES, default="keep")
    p.add_argument("--segment-max-bytes", type=int, default=64 << 20)
    p.add_argument("--segment-max-seconds", type=float, default=60.0)
    p.add_argument("--advertised-host", default=None)
    p.add_argument("--writer", choices=WRITERS, default="thread")
    a = p.parse_args(argv)
    return record(a.upstream, a.listen, a.out, a.payloads, segment_max_bytes=a.segment_max_bytes,
                  segment_max_seconds=a.segment_max_seconds, advertised_host=a.advertised_host, writer=a.writer)


if __name__ == "__main__":
    sys.exit(main())
