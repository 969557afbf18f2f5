"""`kipcheck record`: run the capture proxy and write a Parquet trace until interrupted.

Entry: `record(upstream, listen, out_dir, payloads="keep") -> int` (exit status).

`writer`: "thread" (default) writes the trace from a thread of this process; "process"
writes it from a child process (`ProcessTraceSink`), which keeps the writer's decoding and
Parquet encoding off the forwarding path's GIL: lower added latency, at the cost of
shipping every frame through a pipe (one batch per socket read; see
benchmarks/proxy_bench.py and docs/replay.md "Capture proxy cost").
Prints one line ``kipcheck record: listening <bootstrap> -> <upstream>`` once ready, so a
caller (or a test) can point clients at the proxy.

Bad --upstream/--listen: one line ``kipcheck record: error: ...``, exit 2 (reports/usage.py). An upstream that does
not accept TCP at start is a one-line warning, not a refusal: a capture proxy is often
started before the cluster it fronts, and every client connection dials upstream anew.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys

from replay.proxy import CaptureProxy, ProcessTraceSink, parse_hostport
from replay.trace_writer import PAYLOAD_MODES, TraceWriter
from reports.usage import usage_line


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
PROBE_TIMEOUT_S = 3.0


def _fail(msg: str) -> int:
    print(usage_line("record", msg), file=sys.stderr, flush=True)
    return 2


def check_addresses(upstream: str, listen: str) -> str | None:
    """A one-line problem with --upstream/--listen, or None (before any socket is opened)."""
    pieces = [p for p in upstream.split(",") if p.strip()]
    if not pieces:
        return "--upstream needs host:port[,host:port...]"
    for piece in pieces:
        try:
            _, port = parse_hostport(piece)
        except ValueError:
            return f"--upstream: expected host:port[,host:port...], got {upstream!r}"
        if not 0 < port <= 65535:
            return f"--upstream: port out of range in {piece!r}"
    try:
        _, port = parse_hostport(listen)
    except ValueError:
        return f"--listen: expected host:port, got {listen!r}"
    if not 0 <= port <= 65535:
        return f"--listen: port out of range in {listen!r}"
    return None


def upstream_unreachable(upstream: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why no upstream bootstrap address accepts TCP now, or None. Recording still starts
    (a proxy is often started before its cluster); the caller warns in one line."""
    errors = []
    for piece in (p for p in upstream.split(",") if p.strip()):
        host, port = parse_hostport(piece)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return None
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    return "; ".join(errors)


def record(upstream: str, listen: str, out_dir: str, payloads: str = "keep", *,
           segment_max_bytes: int = 64 << 20, segment_max_seconds: float = 60.0,
           advertised_host: str | None = None, writer: str = "thread") -> int:
    if payloads not in PAYLOAD_MODES:
        return _fail(f"--payloads must be one of {', '.join(PAYLOAD_MODES)}")
    if writer not in WRITERS:
        return _fail(f"--writer must be one of {', '.join(WRITERS)}")
    problem = check_addresses(upstream, listen)
    if problem:
        return _fail(problem)
    if segment_max_bytes <= 0 or segment_max_seconds <= 0:
        return _fail("--segment-max-bytes and --segment-max-seconds must be positive")
    unreachable = upstream_unreachable(upstream)
    if unreachable:
        print(f"kipcheck record: warning: upstream {upstream} is not reachable now ({unreachable}); "
              "recording starts anyway and connects per client connection", file=sys.stderr, flush=True)
    try:
        return asyncio.run(_run(upstream, listen, out_dir, payloads, segment_max_bytes, segment_max_seconds,
                                advertised_host, writer_kind=writer))
    except OSError as exc:
        return _fail(f"cannot record: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
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
