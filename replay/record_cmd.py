"""`kipcheck record`: run the capture proxy and write a Parquet trace until interrupted.

Entry: `record(upstream, listen, out_dir, payloads="keep") -> int` (exit status).

`writer`: "spool" spools the raw frames (replay/capture_spool.py: one writev per batch from
a thread, no decoding) and decodes them into the Parquet trace when the recording ends: the
cheapest capture, used by default ("auto") with payloads=keep. "thread" writes the trace
from a thread of this process; "process" from a child process (`ProcessTraceSink`), which
keeps the writer's decoding and Parquet encoding off the forwarding path's GIL at the cost
of shipping every frame through a pipe. Both decode while recording, which the spool must
not do with hash/drop (it would put the values on disk), so "auto" picks "thread" there.
Spool files a killed recorder left in --out are decoded into it before a new recording
starts. A recording ends with `kipcheck compact` (replay/compact.py) into OUT.v3, the
layout check and diff read (`compact=False`, `--no-compact`: skip it); a compaction that
fails is one line on stderr and exit status 1, the recorded trace stays as it is. See
benchmarks/proxy_bench.py and docs/replay.md "Capture proxy cost".
Prints one line ``kipcheck record: listening <bootstrap> -> <upstream>`` once ready, so a
caller (or a test) can point clients at the proxy.

Bad --upstream/--listen: one line ``kipcheck record: error: ...``, exit 2 (reports/usage.py). An upstream that does
not accept TCP at start is a one-line warning, not a refusal: a capture proxy is often
started before the cluster it fronts, and every client connection dials upstream anew.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import signal
import socket
import sys

from replay import trace_reader
from replay.capture_spool import SpoolSink, decode_spools, leftover_spools
from replay.compact import compact as compact_trace
from replay.proxy import CaptureProxy, ProcessTraceSink, parse_hostport
from replay.trace_writer import PAYLOAD_MODES, TraceWriter
from reports.usage import usage_line


async def _run(upstream: str, listen: str, out_dir: str, payloads: str, segment_max_bytes: int,
               segment_max_seconds: float, advertised_host: str | None = None,
               stop: asyncio.Event | None = None, writer_kind: str = "auto") -> int:
    sink = SINKS[resolve_writer(writer_kind, payloads)]
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
        if "spool_bytes" in s:
            print(f"kipcheck record: decoded {s['spool_bytes'] / 1e6:.1f} MB of spooled frames in {s['decode_s']} s "
                  f"({s['decode_cpu_s']} CPU s)", flush=True)
    return 0 if writer.stats["write_errors"] == 0 else 1


SINKS = {"spool": SpoolSink, "thread": TraceWriter, "process": ProcessTraceSink}
WRITERS = ("auto", *SINKS)


def resolve_writer(writer: str, payloads: str) -> str:
    """auto: the spool with payloads=keep (cheapest capture); else a writer that applies the
    payload policy before anything reaches the disk."""
    if writer != "auto":
        return writer
    return "spool" if payloads == "keep" else "thread"


def end_with_compaction(out_dir: str) -> int:
    """Compact the finished recording into OUT.v3: 0, or 1 with one line on stderr."""
    if not glob.glob(os.path.join(out_dir, "*.parquet")):
        return 0  # nothing was recorded: nothing to compact
    try:
        r = compact_trace(out_dir)
    except (trace_reader.TraceError, ValueError, OSError) as exc:
        print(f"kipcheck record: trace not compacted: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"kipcheck record: compacted into {r.out_dir} ({r.exchanges} exchange(s), {r.buckets} bucket(s), "
          f"{r.seconds:.1f} s)", flush=True)
    return 0


def finish_leftovers(out_dir: str, **writer_kwargs) -> None:
    """Decode the spool files a killed recorder left in `out_dir` into its trace."""
    spools = leftover_spools(out_dir)
    if spools:
        stats, _ = decode_spools(spools, out_dir, **writer_kwargs)
        print(f"kipcheck record: decoded {len(spools)} spool file(s) left by an earlier recording: "
              f"{stats['exchanges']} exchange(s)", flush=True)


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
           advertised_host: str | None = None, writer: str = "auto", compact: bool = True) -> int:
    if payloads not in PAYLOAD_MODES:
        return _fail(f"--payloads must be one of {', '.join(PAYLOAD_MODES)}")
    if writer not in WRITERS:
        return _fail(f"--writer must be one of {', '.join(WRITERS)}")
    if resolve_writer(writer, payloads) == "spool" and payloads != "keep":
        return _fail("--writer spool keeps payloads as sent until the recording ends: use it with --payloads keep")
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
        finish_leftovers(out_dir, segment_max_bytes=segment_max_bytes, segment_max_seconds=segment_max_seconds)
        status = asyncio.run(_run(upstream, listen, out_dir, payloads, segment_max_bytes, segment_max_seconds,
                                  advertised_host, writer_kind=writer))
        return max(status, end_with_compaction(out_dir)) if compact else status
    except ValueError as exc:  # a file in --out that looks like a spool but is not one
        return _fail(f"cannot record: {exc}")
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
    p.add_argument("--writer", choices=WRITERS, default="auto")
    p.add_argument("--no-compact", action="store_true", help="do not end the recording with `kipcheck compact`")
    a = p.parse_args(argv)
    return record(a.upstream, a.listen, a.out, a.payloads, segment_max_bytes=a.segment_max_bytes,
                  segment_max_seconds=a.segment_max_seconds, advertised_host=a.advertised_host, writer=a.writer,
                  compact=not a.no_compact)


if __name__ == "__main__":
    sys.exit(main())
