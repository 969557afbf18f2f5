"""Kafka-protocol-aware capture proxy (asyncio).

One listener per upstream broker. The forwarding path is cut-through (`StreamSplitter`):
frame bytes go on as they arrive, with only the header peeked (api key/version/correlation
id) so the matching response can be paired later. A frame is held whole only when it must
be inspected: a response whose schema may carry broker endpoints (Metadata,
FindCoordinator, DescribeCluster, and Produce/Fetch/ShareFetch/ShareAcknowledge versions
with ``node_endpoints``), so that every endpoint handed to a client points at a proxy
listener (new listeners open for brokers first seen in a response); and, with a request
fault hook, every request. Produce/Fetch responses are decoded only when a skip walk finds
the endpoint tag (`address_rewrite.may_carry_endpoints`). Everything else is forwarded
byte for byte, never decoded.

Recording is off the path: finished exchanges (frames + timings) go, one list per read, to
`hand_off()`, which never waits; one emitter task offers them to the sink in order
(`offer_many` when the sink has it, else `offer`) and waits while the sink is full
(back-pressure on the trace, not on the clients). Exchanges that cannot be recorded are
reported to the sink as gaps (`record_gap(count, reason)`), including a hand-off backlog
over `handoff_max_bytes`. Sinks: `capture_spool.SpoolSink` (raw frames to a spool file,
decoded when the recording ends: the cheapest), `TraceWriter` (decodes in a thread of this
process) and `ProcessTraceSink` (decodes in a child process).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import multiprocessing
import operator
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from reference_impl.protocol import framing
from replay import address_rewrite
from replay import trace_schema as ts
from replay.trace_writer import PAYLOAD_MODES, RawExchange, TraceWriter
from reference_impl.protocol.api_keys import ApiKey

log = logging.getLogger("kipcheck.replay.proxy")


class Sink(Protocol):
    def offer(self, item: Any) -> bool: ...
    def record_gap(self, count: int, reason: str, connection_id: int | None = None) -> None: ...


def parse_hostport(s: str) -> tuple[str, int]:
    host, _, port = s.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {s!r}")
    return host.strip("[]"), int(port)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def produce_acks(frame: bytes, api_version: int) -> int | None:
    """The acks of a Produce request, read without decoding the records (None: unknown)."""
    try:
        flexible = framing.is_flexible(ApiKey.PRODUCE, api_version)
        pos = 8
        (n,) = struct.unpack_from(">h", frame, pos)  # client_id (legacy string in both headers)
        pos += 2 + max(n, 0)
        if flexible:
            count, pos = _uvarint(frame, pos)
            for _ in range(count):
                _, pos = _uvarint(frame, pos)
                size, pos = _uvarint(frame, pos)
                pos += size
        if api_version >= 3:  # transactional_id
            if flexible:
                n, pos = _uvarint(frame, pos)
                pos += max(n - 1, 0)
            else:
                (n,) = struct.unpack_from(">h", frame, pos)
                pos += 2 + max(n, 0)
        return struct.unpack_from(">h", frame, pos)[0]
    except Exception:
        return None


def warm_up_rewrite_schemas(max_version: int = 20) -> None:
    """Import and compile, before the first client arrives, the kio response schemas the
    forwarding path decodes (those that may carry endpoints): kio imports a schema module
    and builds its reader on first use, ~0.1 s that would otherwise stall the first
    Fetch/Produce/Metadata response of a run (and every connection waiting behind it)."""
    for key in address_rewrite.REWRITE_API_KEYS:
        for version in range(max_version + 1):
            if address_rewrite.needs_rewrite_check(key, version):
                framing._reader(framing.response_schema(key, version))


@dataclass
class Listener:
    upstream: tuple[str, int]
    local: tuple[str, int]
    server: asyncio.base_events.Server


@dataclass
class _Pending:
    api_key: int
    api_version: int
    correlation_id: int
    mono_ns: int
    wall_ms: int
    frame: bytes


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0
    responses: int = 0
    rewritten_responses: int = 0
    backpressure_waits: int = 0
    backpressure_ns: int = 0
    handoff_gaps: int = 0
    opaque_connections: int = 0
    upstream_connect_failures: int = 0
    listeners: list = field(default_factory=list)


class CaptureProxy:
    """`upstream`: comma-separated bootstrap host:port list; `listen`: host:port of the
    first listener (port 0: every listener ephemeral; else later listeners take the next
    free ports above it). `advertised_host` is the host written into rewritten endpoints."""

    def __init__(
        self,
        upstream: str,
        listen: str = "127.0.0.1:0",
        sink: Sink | None = None,
        *,
        advertised_host: str | None = None,
        max_block_s: float | None = None,
        handoff_max_bytes: int = 64 << 20,
    ) -> None:
        self.upstreams = [parse_hostport(u) for u in upstream.split(",") if u.strip()]
        if not self.upstreams:
            raise ValueError("no upstream bootstrap address")
        self.listen_host, self.listen_port = parse_hostport(listen)
        self.advertised_host = advertised_host or self.listen_host
        self.sink = sink
        self.max_block_s = max_block_s
        self.handoff_max_bytes = handoff_max_bytes
        self._backlog: collections.deque = collections.deque()
        self._backlog_bytes = 0
        self._backlog_event = asyncio.Event()
        self._emitter: asyncio.Task | None = None
        self.half_close_s = 30.0
        self.listeners: dict[tuple[str, int], Listener] = {}
        self._next_port = self.listen_port
        self._lock = asyncio.Lock()
        self._conn_ids = itertools.count(1)
        self._next_seq = 1
        self._conn_tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.stats = ProxyStats()
        # Per-request faults (chaos.nemesis.request_faults.RequestFaultHook) and the node
        # id of each upstream "host:port" the hook matches on (-1: unknown).
        self.request_hook: Any = None
        self.node_ids: dict[str, int] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        warm_up_rewrite_schemas()
        self._emitter = asyncio.create_task(self._run_emitter())
        for up in self.upstreams:
            await self.listener_for(up)

    async def stop(self, grace_s: float = 5.0) -> None:
        for lst in self.listeners.values():
            lst.server.close()
        for w in list(self._writers):
            w.close()
        tasks = list(self._conn_tasks)
        if tasks:  # let connections finish their bookkeeping (in-flight rows), then cancel
            await asyncio.wait(tasks, timeout=grace_s)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_emitter(grace_s)
        for lst in self.listeners.values():
            await lst.server.wait_closed()

    async def _stop_emitter(self, grace_s: float) -> None:
        """Let the sink take the backlog while it makes progress (stuck for `grace_s`: give
        up), then record the rest as gaps."""
        if self._emitter is None:
            return
        deadline, taken = time.monotonic() + grace_s, self._next_seq
        while self._backlog and time.monotonic() < deadline and not self._emitter.done():
            await asyncio.sleep(0.01)
            if self._next_seq != taken:  # the sink took some: keep waiting
                deadline, taken = time.monotonic() + grace_s, self._next_seq
        self._emitter.cancel()
        await asyncio.gather(self._emitter, return_exceptions=True)
        self._emitter = None
        while self._backlog:
            items, size = self._backlog.popleft()
            self._backlog_bytes -= size
            self.sink.record_gap(len(items), "proxy stopped while waiting for the trace writer", items[0].connection_id)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.advertised_host}:{self.listeners[u].local[1]}" for u in self.upstreams)

    def mapping(self) -> dict[str, str]:
        """upstream host:port -> proxy host:port, for reports and tests."""
        return {f"{u[0]}:{u[1]}": f"{self.advertised_host}:{lst.local[1]}" for u, lst in self.listeners.items()}

    async def listener_for(self, upstream: tuple[str, int]) -> Listener:
        lst = self.listeners.get(upstream)
        if lst is not None:
            return lst
        async with self._lock:
            lst = self.listeners.get(upstream)
            if lst is not None:
                return lst
            server = await self._bind(upstream)
            port = server.sockets[0].getsockname()[1]
            lst = Listener(upstream, (self.listen_host, port), server)
            self.listeners[upstream] = lst
            self.stats.listeners.append((f"{upstream[0]}:{upstream[1]}", port))
            log.info("listener %s:%s -> %s:%s", self.listen_host, port, *upstream)
            return lst

    async def _bind(self, upstream: tuple[str, int]) -> asyncio.base_events.Server:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            self._conn_tasks.add(task)
            try:
                await self._serve(upstream, reader, writer)
            except asyncio.CancelledError:
                pass  # proxy stopping; asyncio would log a cancelled client callback task
            finally:
                self._conn_tasks.discard(task)

        if self.listen_port == 0:
            return await asyncio.start_server(on_connect, self.listen_host, 0, limit=STREAM_LIMIT)
        last: OSError | None = None
        for _ in range(1000):
            port = self._next_port
            self._next_port += 1
            try:
                return await asyncio.start_server(on_connect, self.listen_host, port, limit=STREAM_LIMIT)
            except OSError as exc:
                if port == self.listen_port and not self.listeners:
                    raise OSError(f"cannot listen on {self.listen_host}:{port}: {exc.strerror}") from exc
                last = exc
        raise OSError(f"no free port above {self.listen_port}: {last}")

    # -- connections --------------------------------------------------------------------------

    async def _serve(self, upstream: tuple[str, int], c_reader, c_writer) -> None:
        conn_id = next(self._conn_ids)
        self.stats.connections += 1
        peer = c_writer.get_extra_info("peername") or ("?", 0)
        local = c_writer.get_extra_info("sockname") or ("?", 0)
        try:
            u_reader, u_writer = await asyncio.open_connection(*upstream, limit=STREAM_LIMIT)
        except OSError as exc:
            self.stats.upstream_connect_failures += 1
            log.warning("conn %s: upstream %s:%s unreachable: %s", conn_id, *upstream, exc)
            c_writer.close()
            return
        self._writers.update((c_writer, u_writer))
        conn = _Conn(self, conn_id, f"{local[0]}:{local[1]}", f"{upstream[0]}:{upstream[1]}", str(peer[0]), int(peer[1]))
        conn.client_writer = c_writer
        up = asyncio.create_task(conn.client_to_upstream(c_reader, u_writer))
        down = asyncio.create_task(conn.upstream_to_client(u_reader, c_writer))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if up.done() and not down.done():
                # Client finished sending (EOF was passed on): let the broker side finish its
                # responses and the trace hand-off; a broker closes on EOF, so this is short.
                await asyncio.wait({down}, timeout=self.half_close_s)
            for t in (up, down):
                t.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
        finally:
            for t in (up, down):
                t.cancel()
            for w in (c_writer, u_writer):
                w.close()
                self._writers.discard(w)
            await conn.connection_closed()

    def hand_off(self, items: list[RawExchange]) -> None:
        """Queue finished exchanges for the sink without ever waiting: the forwarding path
        goes on whatever the writer does. A backlog over `handoff_max_bytes` (the writer
        far behind) is recorded as a gap instead of stalling every client."""
        if self.sink is None or not items:
            return
        size = sum(len(x.request_frame) + len(x.response_frame or b"") for x in items)
        if self._backlog_bytes + size > self.handoff_max_bytes and self._backlog:
            self.stats.handoff_gaps += len(items)
            self.sink.record_gap(len(items), f"trace writer backlog: hand-off buffer over {self.handoff_max_bytes} "
                                             "bytes", items[0].connection_id)
            return
        self._backlog.append((items, size))
        self._backlog_bytes += size
        self._backlog_event.set()

    async def _run_emitter(self) -> None:
        """The one consumer of the hand-off backlog: numbers exchanges in FIFO order and
        offers them to the sink, batched when the sink takes batches (`offer_many`);
        waits (back-pressure on the trace only) while the sink is full."""
        while True:
            await self._backlog_event.wait()
            self._backlog_event.clear()
            while self._backlog:
                items, size = self._backlog[0]
                try:
                    await self._offer_all(items)
                except Exception as exc:  # noqa: BLE001 - a broken sink loses rows, never the proxy
                    log.exception("trace sink failed")
                    self.sink.record_gap(len(items), f"trace sink failed: {exc}", items[0].connection_id)
                finally:
                    self._backlog.popleft()
                    self._backlog_bytes -= size

    async def _offer_all(self, items: list[RawExchange]) -> None:
        start = None
        delay = 0.001
        try:
            while items:
                taken = self._offer_some(items)
                if taken:
                    items = items[taken:]
                    continue
                now = time.monotonic_ns()
                if start is None:
                    start = now
                    self.stats.backpressure_waits += 1
                waited = (now - start) / 1e9
                if self.max_block_s is not None and waited >= self.max_block_s:
                    self.sink.record_gap(len(items), f"trace writer backlog: waited {waited:.2f}s > max_block_s",
                                         items[0].connection_id)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.005)
        except asyncio.CancelledError:
            if items:
                self.sink.record_gap(len(items), "proxy stopped while waiting for the trace writer",
                                     items[0].connection_id)
            raise
        finally:
            if start is not None:
                self.stats.backpressure_ns += time.monotonic_ns() - start

    def _offer_some(self, items: list[RawExchange]) -> int:
        # seq is the order of the sink's FIFO (numbered at the moment of the hand-off), so
        # the completed segments of a killed recorder hold exactly seq 1..N
        for i, x in enumerate(items):
            x.seq = self._next_seq + i
        offer_many = getattr(self.sink, "offer_many", None)
        if offer_many is not None:
            taken = offer_many(items)
        else:
            taken = 0
            for x in items:
                if not self.sink.offer(x):
                    break
                taken += 1
        self._next_seq += taken
        return taken

    async def rewrite_response(self, frame: bytes, p: _Pending) -> tuple[bytes, Any, int]:
        """(frame to send, decoded body or None, endpoints rewritten)."""
        if not address_rewrite.may_carry_endpoints(frame, p.api_key, p.api_version):
            return frame, None, 0
        try:
            decoded = framing.decode_response_frame(frame, p.api_key, p.api_version)
        except Exception as exc:
            log.warning("cannot decode api %s v%s response to rewrite it: %s", p.api_key, p.api_version, exc)
            return frame, None, 0
        endpoints = address_rewrite.find_endpoints(decoded.body)
        if not endpoints:
            return frame, decoded.body, 0
        for ep in endpoints:
            await self.listener_for(ep)
        new_body, n = address_rewrite.rewrite(
            decoded.body, lambda ep: (self.advertised_host, self.listeners[ep].local[1])
        )
        if not n:
            return frame, decoded.body, 0
        self.stats.rewritten_responses += 1
        out = framing.encode_response(new_body, decoded.correlation_id, p.api_key, p.api_version)[4:]
        return out, decoded.body, n


class StreamSplitter:
    """Cut-through frame splitting of one direction of a connection.

    Kafka frames are forwarded as their bytes arrive: a 1 MiB Fetch response is not held
    until its last byte (store-and-forward would add its whole transfer time to every
    round trip). Once the first `peek` bytes of a frame are in, `decide(prefix)` says
    PASS (forward as it comes), HOLD (the caller forwards it once complete: rewriting,
    faults) or HOLD_LAST (as HOLD, and the stream stops being Kafka framing after it:
    legacy SASL). `feed()` returns, in stream order, ("pass", bytes) to forward now,
    ("frame", frame, held) for each completed frame (its bytes for the trace) and
    ("opaque", bytes) for bytes after a HOLD_LAST frame."""

    PASS, HOLD, HOLD_LAST = 0, 1, 2

    def __init__(self, peek: int, decide: Any, max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES) -> None:
        self.peek = peek
        self.decide = decide
        self.max = max_frame_bytes
        self.opaque = False
        self._head = bytearray()  # size prefix + first bytes of an undecided frame
        self._parts: list[Any] = []  # the current frame's bytes so far
        self._left = 0  # bytes of the current frame still to come
        self._verdict = -1  # -1: between frames (or undecided)
        self.error: str | None = None  # why the stream stopped being Kafka framing

    def go_opaque(self) -> bytes:
        """Stop splitting; the bytes read but not forwarded yet, to forward first."""
        self.opaque = True
        if self._verdict == self.PASS:
            rest = b""
        elif self._verdict < 0:
            rest = bytes(self._head)
        else:
            rest = framing.size_prefixed(b"".join(self._parts))
        self._head, self._parts, self._verdict = bytearray(), [], -1
        return rest

    def feed(self, data: bytes) -> list[tuple]:
        """Events of one read. An impossible size prefix ends the splitting: the frames
        before it are returned as usual (Kafka answers them before it closes), then
        ("opaque", the bytes from that prefix on), and `error` says why."""
        if self.opaque:
            return [("opaque", data)]
        events: list[tuple] = []
        view, pos, n = memoryview(data), 0, len(data)
        try:
            while pos < n:
                if self._verdict < 0:
                    pos = self._read_head(view, pos, n, events)
                    continue
                take = min(self._left, n - pos)
                piece = view[pos:pos + take]
                self._parts.append(piece)
                if self._verdict == self.PASS:
                    events.append(("pass", piece))
                pos += take
                self._left -= take
                if not self._left:
                    self._complete(events)
                    if self.opaque:
                        if pos < n:
                            events.append(("opaque", bytes(view[pos:])))
                        break
        except framing.FrameError as exc:
            self.error = str(exc)
            pos = getattr(exc, "pos", pos)
            events.append(("opaque", self.go_opaque() + bytes(view[pos:])))
        return events

    def _check_size(self) -> int:
        (size,) = struct.unpack_from(">i", self._head, 0)
        framing.check_frame_size(size, self.max)
        return size

    def _read_head(self, view: memoryview, pos: int, n: int, events: list) -> int:
        if len(self._head) < 4:
            take = min(4 - len(self._head), n - pos)
            self._head += view[pos:pos + take]
            pos += take
            if len(self._head) < 4:
                return pos
        try:
            size = self._check_size()
        except framing.FrameError as exc:
            exc.pos = pos  # the prefix is in _head already
            raise
        want = 4 + min(self.peek, size)
        take = min(want - len(self._head), n - pos)
        self._head += view[pos:pos + take]
        pos += take
        if len(self._head) < want:
            return pos
        body = bytes(self._head[4:])
        self._verdict = self.decide(body)
        self._parts = [body]
        self._left = size - len(body)
        if self._verdict == self.PASS:
            events.append(("pass", bytes(self._head)))
        self._head = bytearray()
        if not self._left:
            self._complete(events)
        return pos

    def _complete(self, events: list) -> None:
        parts = self._parts
        frame = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        events.append(("frame", frame, self._verdict != self.PASS))
        if self._verdict == self.HOLD_LAST:
            self.opaque = True
        self._parts, self._verdict = [], -1


def _write_frame(writer: asyncio.StreamWriter, frame: bytes) -> None:
    if len(frame) < 65536:
        writer.write(framing.size_prefixed(frame))
    else:  # no copy of a large frame just to prefix it
        writer.write(struct.pack(">i", len(frame)))
        writer.write(frame)


def _write_passes(writer: asyncio.StreamWriter, pieces: list) -> None:
    if len(pieces) == 1:
        writer.write(pieces[0])
    elif pieces:
        writer.write(b"".join(pieces))
    pieces.clear()


READ_BYTES = 1 << 18
STREAM_LIMIT = 1 << 20


class _Conn:
    def __init__(self, proxy: CaptureProxy, conn_id: int, listener: str, upstream: str, host: str, port: int) -> None:
        self.proxy = proxy
        self.id = conn_id
        self.listener = listener
        self.upstream = upstream
        self.client_host = host
        self.client_port = port
        self.pending: dict[int, _Pending] = {}
        self.opaque = False
        self.client_writer: asyncio.StreamWriter | None = None

    def _exchange(self, p: _Pending, **kw: Any) -> RawExchange:
        return RawExchange(
            seq=0, connection_id=self.id, listener=self.listener, upstream=self.upstream,
            client_host=self.client_host, client_port=self.client_port, api_key=p.api_key,
            api_version=p.api_version, correlation_id=p.correlation_id, request_mono_ns=p.mono_ns,
            request_wall_ms=p.wall_ms, request_frame=p.frame, **kw,
        )

    # -- client -> broker -------------------------------------------------------------------

    def _decide_request(self, prefix: bytes) -> int:
        # a fault hook judges whole requests; without one every request is cut through
        return StreamSplitter.HOLD if self.proxy.request_hook is not None else StreamSplitter.PASS

    async def client_to_upstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._pump(reader, writer, StreamSplitter(8, self._decide_request), self._request, "client stream")
        if writer.can_write_eof():
            writer.write_eof()

    async def _request(self, frame: bytes, held: bool, mono: int, wall: int, passes: list,
                       no_response: list[RawExchange], writer: asyncio.StreamWriter) -> None:
        """Book a complete request (its bytes already went out unless `held`): pending until
        its response, or a finished exchange when Produce acks=0 gets none."""
        try:
            key, ver, corr = framing.peek_request_header(frame)
        except framing.FrameError:
            key, ver, corr = -1, -1, -1
        if held:  # held for the fault hook
            _write_passes(writer, passes)
            verdict = self._fault_verdict(key, ver, frame)
            if verdict is not None and not await self._apply_fault(verdict, key, ver, corr, writer):
                return
        p = _Pending(key, ver, corr, mono, wall, frame)
        self.proxy.stats.requests += 1
        if key == ApiKey.PRODUCE and produce_acks(frame, ver) == 0:
            no_response.append(self._exchange(p, status=ts.STATUS_NO_RESPONSE_EXPECTED))
        else:
            self.pending[corr] = p
        if held:
            _write_frame(writer, frame)

    def _fault_verdict(self, key: int, ver: int, frame: bytes) -> Any:
        hook = self.proxy.request_hook
        if hook is None or key < 0:
            return None
        return hook.decide(self.proxy.node_ids.get(self.upstream, -1), key, ver, frame)

    async def _apply_fault(self, verdict: Any, key: int, ver: int, corr: int, writer: asyncio.StreamWriter) -> bool:
        """Carry out a request fault; True: forward the request now. drop closes the
        connection; error answers the client once the requests before it are answered."""
        if verdict.action in ("hold", "delay"):
            await asyncio.sleep(verdict.delay_s)
            return True
        if verdict.action == "drop":
            writer.close()
            raise ConnectionResetError("request dropped by a fault")
        deadline = time.monotonic() + 30.0
        while self.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert self.client_writer is not None
        self.client_writer.write(self.proxy.request_hook.error_frame(key, ver, corr, verdict.error_code))
        await self.client_writer.drain()
        return False

    def _framing_broke(self, split: StreamSplitter, stream: str) -> None:
        """After an impossible size prefix both directions are forwarded opaque (gap row)."""
        if split.error is None or self.opaque:
            return
        self.opaque = True
        self.proxy.stats.opaque_connections += 1
        self.proxy.sink and self.proxy.sink.record_gap(
            0, f"connection {self.id} forwarded opaque from here: {stream}: {split.error}", self.id)

    # -- broker -> client -------------------------------------------------------------------

    def _decide_response(self, prefix: bytes) -> int:
        """Hold only responses whose schema can carry endpoints, and the legacy SASL
        handshake's (after it the stream is raw SASL tokens)."""
        p = self.pending.get(struct.unpack_from(">i", prefix, 0)[0])
        if p is None:
            return StreamSplitter.PASS
        if p.api_key == ApiKey.SASL_HANDSHAKE and p.api_version == 0:
            return StreamSplitter.HOLD_LAST
        if address_rewrite.needs_rewrite_check(p.api_key, p.api_version):
            return StreamSplitter.HOLD
        return StreamSplitter.PASS

    async def upstream_to_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._pump(reader, writer, StreamSplitter(4, self._decide_response), self._response, "broker stream")

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, split: StreamSplitter,
                    on_frame: Any, where: str) -> None:
        """Forward one direction until EOF: bytes the splitter passes go out as they come;
        each whole frame it holds goes to ``on_frame``, which books or finishes exchanges
        that are handed to the writer after each read."""
        while True:
            data = await reader.read(READ_BYTES)
            if not data:
                return
            passes: list = []
            if self.opaque and not split.opaque:
                passes.append(split.go_opaque())
            events = split.feed(data)
            mono, wall = time.monotonic_ns(), time.time_ns() // 1_000_000
            finished: list[RawExchange] = []
            try:
                for ev in events:
                    if ev[0] != "frame":
                        passes.append(ev[1])
                    else:
                        await on_frame(ev[1], ev[2], mono, wall, passes, finished, writer)
                self._framing_broke(split, where)
                _write_passes(writer, passes)
            finally:  # handed off even when cancelled mid-batch (no await in hand_off)
                self.proxy.hand_off(finished)
            await writer.drain()

    async def _response(self, frame: bytes, held: bool, mono: int, wall: int, passes: list,
                        done: list[RawExchange], writer: asyncio.StreamWriter) -> None:
        corr = struct.unpack_from(">i", frame, 0)[0]
        p = self.pending.pop(corr, None)
        self.proxy.stats.responses += 1
        if p is None:
            if held:
                passes.append(framing.size_prefixed(frame))
            self.proxy.sink and self.proxy.sink.record_gap(
                1, f"response with unknown correlation id {corr} on connection {self.id}", self.id)
            return
        x = self._exchange(p, response_mono_ns=mono, response_wall_ms=wall, response_frame=frame)
        done.append(x)
        if held:
            _write_passes(writer, passes)
            out, x.response_body, x.addresses_rewritten = await self.proxy.rewrite_response(frame, p)
            _write_frame(writer, out)
        if p.api_key == ApiKey.SASL_HANDSHAKE and p.api_version == 0:
            self.opaque = True  # legacy SASL: raw tokens follow; not traced
            self.proxy.sink and self.proxy.sink.record_gap(
                0, f"connection {self.id}: SaslHandshake v0, raw SASL tokens and later traffic not traced", self.id)

    async def connection_closed(self) -> None:
        items = [self._exchange(p, status=ts.STATUS_CONNECTION_CLOSED) for p in self.pending.values()]
        self.pending.clear()
        if items:
            self.proxy.hand_off(items)


class ProcessTraceSink:
    """A `TraceWriter` in a child process, as a proxy sink (same start/offer/record_gap/close
    and `stats`/`segments` after close).

    Why: in the proxy's process the writer thread's decoding, row building and Parquet
    encoding hold the GIL, and the forwarding event loop then waits up to a GIL switch
    interval (5 ms) every time a socket becomes ready: the proxy's latency and throughput
    collapse under load (see benchmarks/proxy_overhead.py). Here the proxy only pickles the
    raw frames onto a bounded queue (count and bytes, as TraceWriter's own), so offer()
    stays non-blocking and back-pressure works the same way. A response decoded on the
    forwarding path is not shipped (the child decodes it again)."""

    def __init__(self, out_dir: str, payloads: str = "keep", *, queue_size: int = 1000,
                 max_queued_bytes: int = 256 << 20, **writer_kwargs: Any) -> None:
        if payloads not in PAYLOAD_MODES:
            raise ValueError(f"payloads must be one of {PAYLOAD_MODES}, not {payloads!r}")
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._items = ctx.Queue(maxsize=queue_size)
        self._gaps = ctx.Queue()  # unbounded: record_gap never blocks
        self._queued_bytes = ctx.Value("q", 0)
        self._result = ctx.Queue()
        self.max_queued_bytes = max_queued_bytes
        self.out_dir = out_dir
        self._proc = ctx.Process(target=_process_writer_main, name="kipcheck-trace-writer", daemon=True,
                                 args=(out_dir, payloads, writer_kwargs, self._items, self._gaps,
                                       self._queued_bytes, self._result))
        self._closed = False
        self.stats: dict[str, int] = {}
        self.segments: list[str] = []

    def start(self) -> "ProcessTraceSink":
        self._proc.start()
        return self

    def offer(self, item: Any) -> bool:
        return self.offer_many([item]) == 1

    def offer_many(self, items: list[RawExchange]) -> int:
        """All of `items` in one queue put (one pickle, one pipe write) or none: 0 when
        the queue is full by count or bytes. Each exchange travels as a flat tuple
        (`_pack`): cheaper to pickle than a dataclass, and without the decoded body."""
        if self._closed or not items:
            return 0
        size = sum(len(x.request_frame) + len(x.response_frame or b"") for x in items)
        queued = self._queued_bytes.value
        if queued and queued + size > self.max_queued_bytes:
            return 0
        try:
            self._items.put_nowait((size, [_pack(x) for x in items]))
        except queue.Full:
            return 0
        with self._queued_bytes.get_lock():
            self._queued_bytes.value += size
        return len(items)

    def record_gap(self, count: int, reason: str, connection_id: int | None = None) -> None:
        if self._closed:
            log.error("gap reported after the trace writer closed: %s x %s", count, reason)
            return
        self._gaps.put((count, reason, connection_id))

    def close(self, timeout: float = 60.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._gaps.close()
        self._gaps.join_thread()  # every gap is in the pipe before the stop marker is sent
        self._items.put(None)
        try:
            self.stats, self.segments = self._result.get(timeout=timeout)
        except queue.Empty:
            log.error("trace writer process did not finish within %ss (exit code %s)", timeout, self._proc.exitcode)
            self.stats = {"rows": 0, "exchanges": 0, "gaps": 0, "gap_exchanges": 0, "segments": 0,
                          "row_errors": 0, "write_errors": 1}
        self._proc.join(timeout)

    def __enter__(self) -> "ProcessTraceSink":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_PACKED = tuple(f.name for f in dataclasses.fields(RawExchange))
_GETTERS = operator.attrgetter(*_PACKED)
_BODY = _PACKED.index("response_body")


def _pack(x: RawExchange) -> tuple:
    """RawExchange's fields in declaration order, without the decoded body (the writer
    process decodes the frames itself); `RawExchange(*t)` rebuilds it."""
    t = _GETTERS(x)
    return t if t[_BODY] is None else t[:_BODY] + (None,) + t[_BODY + 1:]


def _process_writer_main(out_dir: str, payloads: str, writer_kwargs: dict, items, gaps, queued_bytes, result) -> None:
    writer = TraceWriter(out_dir, payloads, **writer_kwargs).start()
    parent = os.getppid()
    while True:
        try:
            item = items.get(timeout=0.2)
        except queue.Empty:
            item = False
        if os.getppid() != parent:
            # The recorder died (SIGKILL): die with it, as the in-process writer would, so
            # the open segment stays a partial .tmp and no orphan keeps running.
            os._exit(1)
        while True:
            try:
                writer.record_gap(*gaps.get_nowait())
            except queue.Empty:
                break
        if item is None:
            break
        if item is False:
            continue
        size, packed = item
        with queued_bytes.get_lock():
            queued_bytes.value -= size
        for fields in packed:
            x = RawExchange(*fields)
            while not writer.offer(x):  # the writer thread's own queue: wait, never drop
                time.sleep(0.001)
    writer.close()
    result.put((writer.stats, writer.segments))


class ThreadedCaptureProxy:
    """A CaptureProxy on its own event loop thread, for synchronous callers (tests)."""

    def __init__(self, upstream: str, listen: str = "127.0.0.1:0", sink: Sink | None = None, **kwargs: Any) -> None:
        self._args = (upstream, listen, sink, kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kipcheck-capture-proxy", daemon=True)
        self.proxy: CaptureProxy | None = None

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> "ThreadedCaptureProxy":
        self._thread.start()
        upstream, listen, sink, kwargs = self._args

        async def make() -> CaptureProxy:
            p = CaptureProxy(upstream, listen, sink, **kwargs)
            await p.start()
            return p

        self.proxy = self.call(make())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            if self.proxy is not None:
                self.call(self.proxy.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    @property
    def bootstrap_servers(self) -> str:
        assert self.proxy is not None
        return self.proxy.bootstrap_servers

    def __enter__(self) -> "ThreadedCaptureProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
