"""Asyncio server: N reference broker nodes in one process, one listener per node.

The server owns sockets and framing only. Each connection handles one request at a
time, in order, as Kafka does (a channel is muted until its response is sent).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import socket
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from reference_impl.handlers._authz import PRINCIPAL
from reference_impl.handlers.api_versions import unsupported_version_response
# Importing reference_impl.handlers (done by these imports) registers every API handler.
from reference_impl.handlers.registry import CloseConnection, RequestContext, lookup
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.broker_state import NodeEndpoint, ReferenceState
from reference_impl.model.clock import Clock, SystemClock
from reference_impl.protocol import framing
from reference_impl.server.runtime import BrokerRuntime
from reference_impl.protocol.api_keys import ApiKey

log = logging.getLogger("kipcheck.broker")

_CLOSE = object()  # answer: close this connection
_NO_RESPONSE = object()  # answer: nothing to send (Produce with acks=0)
_DROPPED = object()  # answer: a fault hook dropped the request; close without answering
_BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class RequestHook(Protocol):
    """Per-request fault injection (chaos.nemesis.request_faults.RequestFaultHook): called
    for every request before its handler; the verdict (None: serve normally) has an
    ``action`` (hold/delay/drop/error), ``delay_s`` and ``error_code``."""

    def decide(self, node_id: int, api_key: int, api_version: int, frame: bytes) -> Any: ...

    def error_frame(self, api_key: int, api_version: int, correlation_id: int, error_code: Any) -> bytes: ...


@dataclass
class _Connection:
    connection_id: int
    node_id: int
    client_host: str
    writer: asyncio.StreamWriter
    state: dict[str, Any]
    task: asyncio.Task | None = None


class ReferenceCluster:
    """The reference broker: `brokers` nodes on consecutive ports (or ephemeral ports)."""

    def __init__(
        self,
        brokers: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        config: BrokerConfig | None = None,
        clock: Clock | None = None,
        advertised_host: str | None = None,
        advertised_ports: dict[int, int] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("--brokers must be at least 1")
        self.host = host
        self.advertised_host = advertised_host or host
        self._requested_port = port
        # Node id -> the port Metadata advertises when it is not the bound one (a fault
        # proxy in front of the node); a restart rebinds the bound port, never this one.
        self._advertised_ports = dict(advertised_ports or {})
        self._bound_ports: dict[int, int] = {}
        self.request_hook: RequestHook | None = None
        self._brokers = brokers
        self.config = config or BrokerConfig()
        self.clock = clock or SystemClock()
        self._sockets: dict[int, socket.socket] = {}
        self._servers: dict[int, asyncio.base_events.Server] = {}
        self._connections: dict[int, _Connection] = {}
        self._ids = itertools.count(1)
        self.runtime: BrokerRuntime | None = None
        self.stats = {"connections": 0, "requests": 0, "closed_bad_input": 0, "handler_errors": 0, "server_errors": 0}

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        endpoints = []
        for i in range(self._brokers):
            node_id = i + 1
            port = 0 if self._requested_port == 0 else self._requested_port + i
            sock = _bind(self.host, port)
            self._sockets[node_id] = sock
            self._bound_ports[node_id] = sock.getsockname()[1]
            advertised = self._advertised_ports.get(node_id, self._bound_ports[node_id])
            endpoints.append(NodeEndpoint(node_id, self.advertised_host, advertised))
        state = ReferenceState(endpoints, self.clock, self.config)
        self.runtime = BrokerRuntime(state, self.clock)
        for node_id in self._sockets:
            await self._listen(node_id)
        self.runtime.start_ticker()
        log.info("reference cluster up: %s", self.bootstrap_servers)

    async def stop(self) -> None:
        for node_id in list(self._servers):
            await self.stop_node(node_id, crash=False)  # the whole cluster goes: nothing to rebuild
        if self.runtime is not None:
            await self.runtime.stop_ticker()

    async def stop_node(self, node_id: int, crash: bool = True) -> None:
        """Stop one node: close its listener and every connection to it. `crash` (a kill):
        the node's in-memory state is lost and rebuilt from the persisted records
        (ReferenceState.on_node_crash); otherwise (an isolation) the node is unreachable
        but keeps its memory."""
        server = self._servers.pop(node_id, None)
        if server is None:
            return
        server.close()
        if crash:
            # First: a killed process sends nothing more, so the connections closing below
            # must not release share records the way a live broker does on a disconnect.
            self.state.on_node_crash(node_id)
        tasks = []
        for conn in [c for c in self._connections.values() if c.node_id == node_id]:
            conn.writer.close()
            if conn.task is not None and conn.task is not asyncio.current_task():
                conn.task.cancel()
                tasks.append(conn.task)
        # Requests parked in wait_for (Fetch max wait, JoinGroup) end with their connection.
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        self._sockets.pop(node_id, None)
        if not crash:
            self.state.on_node_down(node_id)

    async def start_node(self, node_id: int) -> None:
        """Restart a stopped node on the port it had."""
        if node_id in self._servers:
            return
        self._sockets[node_id] = _bind(self.host, self._bound_ports[node_id])
        self.state.on_node_restart(node_id)
        await self._listen(node_id)
        self.state.alive.add(node_id)

    @property
    def state(self) -> ReferenceState:
        assert self.runtime is not None, "cluster not started"
        return self.runtime.state

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{ep.host}:{ep.port}" for ep in self.state.nodes.values())

    @property
    def bound_servers(self) -> str:
        """Where the nodes really listen (differs from bootstrap_servers behind proxies)."""
        return ",".join(f"{self.host}:{self._bound_ports[n]}" for n in sorted(self._bound_ports))

    def bound_port(self, node_id: int) -> int:
        return self._bound_ports[node_id]

    async def _listen(self, node_id: int) -> None:
        sock = self._sockets[node_id]

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(node_id, reader, writer)

        self._servers[node_id] = await asyncio.start_server(on_connect, sock=sock)

    # -- connections ---------------------------------------------------------------

    async def _serve(self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = _Connection(next(self._ids), node_id, str(peer[0]), writer, {}, asyncio.current_task())
        self._connections[conn.connection_id] = conn
        self.stats["connections"] += 1
        frames = framing.FrameReader()
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    return
                batch = frames.feed(data)
                while batch:
                    for frame in batch:
                        answer = await self._answer_with_faults(conn, frame)
                        if answer is _DROPPED:
                            return
                        if answer is _CLOSE:
                            self.stats["closed_bad_input"] += 1
                            return
                        if answer is not _NO_RESPONSE:
                            writer.write(answer)
                            await writer.drain()
                    # Frames are answered before a bad size prefix behind them closes the
                    # connection (FrameReader defers that error to this re-check).
                    batch = frames.feed(b"")
        except framing.FrameError as exc:
            self.stats["closed_bad_input"] += 1
            log.warning("node %s conn %s: closing: %s", node_id, conn.connection_id, exc)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            # A bug in the server itself: visible in stats, and only this connection ends.
            self.stats["server_errors"] += 1
            log.exception("node %s conn %s: server error", node_id, conn.connection_id)
        finally:
            self._connections.pop(conn.connection_id, None)
            await self._on_disconnect(conn)
            writer.close()

    async def _on_disconnect(self, conn: _Connection) -> None:
        self.state.on_disconnect(conn.connection_id)
        await self.runtime.notify()

    async def _answer_with_faults(self, conn: _Connection, frame: bytes) -> Any:
        """Serve a frame, unless the request hook holds, drops or answers it with an error.
        A held request keeps its connection busy, as it would on a Kafka broker."""
        hook = self.request_hook
        verdict = None if hook is None else hook.decide(conn.node_id, *framing.peek_request_header(frame)[:2], frame)
        if verdict is None:
            return await self._answer(conn, frame)
        if verdict.action == "drop":
            return _DROPPED
        if verdict.action == "error":
            api_key, api_version, correlation_id = framing.peek_request_header(frame)
            return hook.error_frame(api_key, api_version, correlation_id, verdict.error_code)
        await asyncio.sleep(verdict.delay_s)  # hold / delay: served late
        return await self._answer(conn, frame)

    async def _answer(self, conn: _Connection, frame: bytes) -> Any:
        self.stats["requests"] += 1
        api_key, api_version, correlation_id = framing.peek_request_header(frame)
        handler = lookup(api_key, api_version)
        if handler is None:
            if api_key == ApiKey.API_VERSIONS:
                return unsupported_version_response(correlation_id)
            # Kafka cannot parse a request of an unknown key/version and closes the channel.
            log.warning("node %s: closing on unsupported api_key=%s version=%s", conn.node_id, api_key, api_version)
            return _CLOSE
        if not self._may_serve(conn, api_key):
            log.warning("node %s: closing: api_key=%s before SASL authentication", conn.node_id, api_key)
            return _CLOSE
        try:
            request = framing.decode_request(frame, strict=False)
        except (framing.PayloadDecodeError, framing.UnsupportedApi) as exc:
            log.warning("node %s: closing on undecodable request: %s", conn.node_id, exc)
            return _CLOSE
        ctx = RequestContext(
            runtime=self.runtime,
            node_id=conn.node_id,
            connection_id=conn.connection_id,
            client_host=conn.client_host,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=request.header.client_id,
            connection_state=conn.state,
        )
        try:
            result = handler.handle(ctx, request.body)
            if inspect.isawaitable(result):
                result = await result
        except CloseConnection as exc:
            log.info("node %s: closing connection as Kafka does: %s", conn.node_id, exc)
            return _CLOSE
        except Exception:
            self.stats["handler_errors"] += 1
            log.exception("node %s: handler for api_key=%s v%s failed", conn.node_id, api_key, api_version)
            return _CLOSE
        finally:
            await self.runtime.notify()
        if result is None:
            return _NO_RESPONSE
        try:
            return framing.encode_response(result, correlation_id, api_key, api_version)
        except Exception:
            # The handler built a response its version cannot encode: a handler bug.
            self.stats["handler_errors"] += 1
            log.exception("node %s: response to api_key=%s v%s does not encode", conn.node_id, api_key, api_version)
            return _CLOSE


    def _may_serve(self, conn: _Connection, api_key: int) -> bool:
        """On a SASL listener (authorizer on) only ApiVersions and the SASL exchange come
        before authentication; Kafka's SaslServerAuthenticator closes the channel on any
        other request (IllegalSaslStateException)."""
        return (not self.state.config.authorizer.enabled or PRINCIPAL in conn.state
                or api_key in _BEFORE_AUTHENTICATION)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


class ThreadedReferenceCluster:
    """A ReferenceCluster on its own event loop thread, for synchronous callers."""

    def __init__(self, **kwargs: Any) -> None:
        self.cluster = ReferenceCluster(**kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kipcheck-reference", daemon=True)

    def start(self) -> "ThreadedReferenceCluster":
        self._thread.start()
        self.call(self.cluster.start())
        return self

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.call(self.cluster.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def stop_node(self, node_id: int, crash: bool = True) -> None:
        self.call(self.cluster.stop_node(node_id, crash))

    def start_node(self, node_id: int) -> None:
        self.call(self.cluster.start_node(node_id))

    def __enter__(self) -> "ThreadedReferenceCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["ReferenceCluster", "ThreadedReferenceCluster", "ErrorCode"]
