"""Raw-frame spool: the capture's cheap path (`kipcheck record --writer spool`, the default
with ``--payloads keep``).

The proxy's sink here does no decoding and no Parquet: `SpoolSink.offer_many()` appends the
finished exchanges (frames, connection id, timings) to a bounded in-memory ring, and one
writer thread appends them to a spool file with a single ``os.writev`` per batch (the frames'
own bytes objects as the iovec: no Python-level copy, and the GIL is released for the write).
The per-exchange work on the GIL is one ``struct.pack``. Decoding (kio), row building and
Parquet encoding happen later, when the recording ends (`close()` runs `decode_spools()`
into the same directory with the usual `TraceWriter`), so the trace is the one the
in-process writers produce, row for row.

When the ring is full (the disk is slower than the traffic), `offer_many()` refuses the
batch: the proxy's emitter waits and, past its hand-off bound, records a gap row, so a
client is never stalled by the capture (replay/proxy.py).

SaslAuthenticate frames are redacted (kio re-encode without ``auth_bytes``) before they are
spooled: a password never reaches the disk, not even for the length of a recording. Record
keys/values are spooled as sent, so `record_cmd` uses the spool only with ``--payloads keep``.

File layout (all integers big-endian): ``MAGIC``, payload mode (1 byte length + ASCII),
then records of one type byte each: ``C`` a connection (id, client port, listener, upstream,
client host), ``X`` an exchange (`_X` header, then the request and response frames), ``G``
a gap (count, wall ms, connection id or -1, reason). A file is ``.spool.tmp`` while written
and renamed to ``.spool`` when rolled or closed; a torn last record (a killed recorder) is
ignored by the reader, and `decode_spools()` turns leftover files into a trace.
"""

from __future__ import annotations

import collections
import glob
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from reference_impl.protocol import framing
from replay import trace_schema as ts
from replay.trace_writer import (Gap, RawExchange, SASL_API_KEYS, TraceWriter, frame_of_request, frame_of_response,
                                 redact_sasl)

log = logging.getLogger("kipcheck.replay.spool")

MAGIC = b"KIPCHECK-SPOOL-1\n"
SUFFIX = ".spool"
STATUSES = (ts.STATUS_OK, ts.STATUS_NO_RESPONSE_EXPECTED, ts.STATUS_CONNECTION_CLOSED)
_STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}
# seq, connection id, api key, api version, correlation id, request mono ns / wall ms,
# response mono ns / wall ms (-1: none), endpoints rewritten, status, request size and
# response size as sent (-1: none), request and response bytes spooled (differ when redacted)
_X = struct.Struct(">qqhhiqqqqiBiiii")
_C = struct.Struct(">qi")
_G = struct.Struct(">qqq")
_LEN = struct.Struct(">H")
IOV_MAX = 512  # iovecs per writev (Linux allows 1024)
# The writer thread is woken by the first batch after it went idle, then gathers for WAKE_S
# unless WAKE_BYTES are queued: a wake-up per small exchange would cost a thread switch
# (and a GIL hand-over) on every round trip.
WAKE_BYTES = 1 << 20
WAKE_S = 0.01


def _text(s: str) -> bytes:
    b = s.encode("utf-8", "replace")[:65535]
    return _LEN.pack(len(b)) + b


@dataclass
class _Batch:
    items: list  # RawExchange, or Gap
    size: int


class SpoolSink:
    """A proxy sink (start / offer / offer_many / record_gap / close; `stats` and
    `segments` after close, as `TraceWriter`) that spools raw frames and decodes them into
    a Parquet trace in `out_dir` at close."""

    def __init__(self, out_dir: str, payloads: str = "keep", *, max_queued_bytes: int = 64 << 20,
                 spool_max_bytes: int = 64 << 20, **writer_kwargs: Any) -> None:
        if payloads != "keep":
            raise ValueError("the raw-frame spool keeps record payloads as sent until the recording ends: "
                             "use a decoding writer (thread or process) for --payloads hash|drop")
        self.out_dir = out_dir
        self.payloads = payloads
        self.max_queued_bytes = max_queued_bytes
        self.spool_max_bytes = spool_max_bytes
        self.writer_kwargs = writer_kwargs
        self._ring: collections.deque[_Batch] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closed = False
        self._prefix = os.path.join(out_dir, f"capture-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}")
        self._file_no = 0
        self._fd = -1
        self._tmp = ""
        self._written = 0
        self._known: set[int] = set()  # connections described in the current file
        self.spools: list[str] = []
        self.spooled_bytes = 0
        self.stats: dict[str, Any] = {}
        self.segments: list[str] = []
        self._thread = threading.Thread(target=self._run, name="kipcheck-spool-writer", daemon=True)
        os.makedirs(out_dir, exist_ok=True)

    # -- proxy side -----------------------------------------------------------------------

    def start(self) -> "SpoolSink":
        self._thread.start()
        return self

    def offer(self, item: RawExchange) -> bool:
        return self.offer_many([item]) == 1

    def offer_many(self, items: list[RawExchange]) -> int:
        """All of `items` into the ring, or none (0) when it holds `max_queued_bytes`
        already: never waits."""
        if self._closed or not items:
            return 0
        size = sum(len(x.request_frame) + len(x.response_frame or b"") for x in items)
        with self._cond:
            if self._queued and self._queued + size > self.max_queued_bytes:
                return 0
            self._ring.append(_Batch(items, size))
            self._queued += size
            if len(self._ring) == 1 or self._queued >= WAKE_BYTES:
                self._cond.notify()
        return len(items)

    def record_gap(self, count: int, reason: str, connection_id: int | None = None) -> None:
        """Spooled in order with the exchanges; never refused (a gap row is small)."""
        if self._closed:
            log.error("gap reported after the spool closed: %s x %s", count, reason)
            return
        with self._cond:
            self._ring.append(_Batch([Gap(count, reason, int(time.time() * 1000), connection_id)], 0))
            if len(self._ring) == 1:
                self._cond.notify()

    def close(self, timeout: float | None = None) -> None:
        """Spool the ring, then decode every spool file of this sink into Parquet segments
        (`stats`/`segments` as TraceWriter's, plus the spool's size and the decode's time)."""
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        cpu0, t0 = time.process_time(), time.perf_counter()
        self.stats, self.segments = decode_spools(self.spools, self.out_dir, **self.writer_kwargs)
        self.stats.update(spool_bytes=self.spooled_bytes, decode_s=round(time.perf_counter() - t0, 3),
                          decode_cpu_s=round(time.process_time() - cpu0, 3))

    def __enter__(self) -> "SpoolSink":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ring and not self._closed:
                    self._cond.wait()
                if not self._closed and self._queued < WAKE_BYTES:
                    self._cond.wait(WAKE_S)  # let small exchanges gather: one writev for many
                batches, self._ring = list(self._ring), collections.deque()
                done = self._closed
            try:
                self._write(batches)
            except OSError as exc:  # a full or broken disk: the batch is lost, and said so if it can be
                log.error("spool write failed: %s", exc)
                lost = sum(len(b.items) for b in batches if b.size)
                try:
                    self._write([_Batch([Gap(lost, f"spool write failed: {exc}", int(time.time() * 1000))], 0)])
                except OSError:
                    log.error("spool: %s exchange(s) lost without a gap row", lost)
            finally:
                with self._cond:
                    self._queued -= sum(b.size for b in batches)
            if done:
                self._finish_file()
                return

    def _write(self, batches: list[_Batch]) -> None:
        iov: list[Any] = []
        pending = 0  # bytes in iov
        for b in batches:
            for x in b.items:
                if self._fd < 0:
                    self._open_file()
                if isinstance(x, Gap):
                    part: tuple = (b"G", _G.pack(x.count, x.wall_ms, -1 if x.connection_id is None else x.connection_id),
                                   _text(x.reason))
                else:
                    part = self._exchange(x)
                iov += part
                pending += sum(map(len, part))
                if self._written + pending >= self.spool_max_bytes:
                    self._flush(iov)
                    pending = 0
                    self._finish_file()
        self._flush(iov)

    def _exchange(self, x: RawExchange) -> tuple:
        """The spool records of one exchange (its connection's first, once per file)."""
        conn: tuple = ()
        if x.connection_id not in self._known:
            self._known.add(x.connection_id)
            conn = (b"C", _C.pack(x.connection_id, x.client_port), _text(x.listener), _text(x.upstream),
                    _text(x.client_host))
        req, resp = _sasl_redacted(x) if x.api_key in SASL_API_KEYS else (x.request_frame, x.response_frame)
        head = _X.pack(x.seq, x.connection_id, x.api_key, x.api_version, x.correlation_id, x.request_mono_ns,
                       x.request_wall_ms, _or(x.response_mono_ns), _or(x.response_wall_ms), x.addresses_rewritten,
                       _STATUS_CODE[x.status], len(x.request_frame),
                       -1 if x.response_frame is None else len(x.response_frame), len(req),
                       -1 if resp is None else len(resp))
        return (*conn, b"X", head, req) + ((resp,) if resp else ())

    def _flush(self, iov: list) -> None:
        for i in range(0, len(iov), IOV_MAX):
            part = iov[i:i + IOV_MAX]
            want = sum(map(len, part))
            n = os.writev(self._fd, part)
            if n < want:  # a short write (rare on a regular file): the rest in one piece
                rest = memoryview(b"".join(part))[n:]
                while rest:
                    rest = rest[os.write(self._fd, rest):]
            self._written += want
            self.spooled_bytes += want
        iov.clear()

    def _open_file(self) -> None:
        self._file_no += 1
        self._tmp = f"{self._prefix}-{self._file_no:05d}{SUFFIX}.tmp"
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        head = MAGIC + bytes([len(self.payloads)]) + self.payloads.encode()
        os.write(self._fd, head)
        self._written = len(head)
        self._known = set()

    def _finish_file(self) -> None:
        if self._fd < 0:
            return
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        final = self._tmp[: -len(".tmp")]
        os.rename(self._tmp, final)
        self.spools.append(final)


def _or(v: int | None) -> int:
    return -1 if v is None else v


def _sasl_redacted(x: RawExchange) -> tuple[bytes, bytes | None]:
    """SaslAuthenticate frames without auth_bytes (re-encoded with kio; rare, so the cost
    does not matter); an undecodable one is spooled as its header alone."""
    try:
        req = framing.decode_request(x.request_frame, strict=False)
        request = frame_of_request(x.request_frame, req.header.header_size, redact_sasl(req.body))
    except Exception:  # noqa: BLE001 - never spool what could not be redacted
        request = x.request_frame[:8]
    if x.response_frame is None:
        return request, None
    try:
        body = framing.decode_response_frame(x.response_frame, x.api_key, x.api_version).body
        return request, frame_of_response(x.response_frame, redact_sasl(body), x.api_key, x.api_version)
    except Exception:  # noqa: BLE001 - as above
        return request, x.response_frame[:4]


# --- reading ------------------------------------------------------------------------------------


def read_spool(path: str) -> Iterator[RawExchange | Gap]:
    """The exchanges and gaps of one spool file in spool order; a torn last record (the
    recorder was killed mid-write) ends the file."""
    with open(path, "rb") as fh:
        data = fh.read()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: not a kipcheck spool file")
    pos = len(MAGIC) + 1 + data[len(MAGIC)]
    conns: dict[int, tuple[str, str, str, int]] = {}
    view = memoryview(data)
    try:
        while pos < len(data):
            kind, pos = data[pos:pos + 1], pos + 1
            if kind == b"C":
                cid, port = _C.unpack_from(data, pos)
                pos += _C.size
                listener, pos = _read_text(data, pos)
                upstream, pos = _read_text(data, pos)
                host, pos = _read_text(data, pos)
                conns[cid] = (listener, upstream, host, port)
            elif kind == b"G":
                count, wall, cid = _G.unpack_from(data, pos)
                reason, pos = _read_text(data, pos + _G.size)
                yield Gap(count, reason, wall, None if cid < 0 else cid)
            elif kind == b"X":
                (seq, cid, key, ver, corr, rq_mono, rq_wall, rs_mono, rs_wall, rewritten, status, rq_size, rs_size,
                 rq_len, rs_len) = _X.unpack_from(data, pos)
                pos += _X.size
                end = pos + rq_len + max(rs_len, 0)
                if end > len(data):
                    return  # torn
                request = bytes(view[pos:pos + rq_len])
                response = None if rs_len < 0 else bytes(view[pos + rq_len:end])
                pos = end
                listener, upstream, host, port = conns[cid]
                yield RawExchange(seq, cid, listener, upstream, host, port, key, ver, corr, rq_mono, rq_wall, request,
                                  STATUSES[status], None if rs_mono < 0 else rs_mono,
                                  None if rs_wall < 0 else rs_wall, response, None, rewritten,
                                  request_size=rq_size, response_size=None if rs_size < 0 else rs_size)
            else:
                raise ValueError(f"{path}: bad record type {kind!r} at byte {pos - 1}")
    except struct.error:
        return  # torn in a record header


def _read_text(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _LEN.unpack_from(data, pos)
    pos += _LEN.size
    if pos + n > len(data):
        raise struct.error("torn")
    return data[pos:pos + n].decode("utf-8", "replace"), pos + n


def spool_payloads(path: str) -> str:
    with open(path, "rb") as fh:
        head = fh.read(len(MAGIC) + 1 + 8)
    if not head.startswith(MAGIC):
        raise ValueError(f"{path}: not a kipcheck spool file")
    n = head[len(MAGIC)]
    return head[len(MAGIC) + 1:len(MAGIC) + 1 + n].decode()


def leftover_spools(out_dir: str) -> list[str]:
    """Spool files a recorder left in `out_dir` (killed before it decoded them), in order;
    not those of a recorder still running there (its pid is in the name)."""
    paths = glob.glob(os.path.join(out_dir, f"*{SUFFIX}")) + glob.glob(os.path.join(out_dir, f"*{SUFFIX}.tmp"))
    return sorted(p for p in paths if not _writer_alive(p))


def _writer_alive(path: str) -> bool:
    """capture-<UTC start>-<pid>-<n>.spool[.tmp]: whether that pid is a live process."""
    try:
        pid = int(os.path.basename(path).split("-")[2])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def decode_spools(spools: list[str], out_dir: str, **writer_kwargs: Any) -> tuple[dict, list[str]]:
    """Decode spool files, in order, into Parquet segments in `out_dir` with `TraceWriter`
    (the same rows the live writers build); each spool file is removed once the segments
    holding its rows are closed. (stats, segments) as TraceWriter's."""
    payloads = spool_payloads(spools[0]) if spools else "keep"
    writer = TraceWriter(out_dir, payloads, **writer_kwargs).start()
    try:
        for path in spools:
            for item in read_spool(path):  # gaps too, in their place (their own wall time)
                while not writer.offer(item):
                    time.sleep(0.001)
    finally:
        writer.close(timeout=None)
    if writer.stats["write_errors"] == 0:
        for path in spools:
            os.remove(path)  # the spool's own file, decoded into the trace
    return writer.stats, writer.segments
