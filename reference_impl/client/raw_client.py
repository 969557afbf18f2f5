"""Raw protocol client: any request, any version, any broker; decoded responses.

It hides nothing: no retries, no version negotiation unless asked, no metadata
refresh. Wire-level conformance tests use it where a client library would hide the
behaviour under test.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
import time
from typing import Any

from reference_impl.client import sasl
from reference_impl.client.security import PLAINTEXT, ClientSecurity
from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing, payloads
from reference_impl.protocol.api_keys import ApiKey

_SIZE = struct.Struct(">i")
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
_RETRIABLE_COORDINATOR_ERRORS = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available})
# Callables observer(client, request_payload, response_payload_or_None): the conformance
# plugin keeps a test's last exchanges as evidence (conformance/evidence.py).
EXCHANGE_OBSERVERS: list[Any] = []


def _observe(client: Any, request: Any, response: Any) -> None:
    for observe in EXCHANGE_OBSERVERS:
        observe(client, request, response)


class ConnectionClosed(ConnectionError):
    """The broker closed the connection (Kafka's answer to requests it cannot parse)."""


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bad bootstrap address {item!r}: expected HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("empty bootstrap server list")
    return out


class RawClient:
    """One connection to one broker; requests are sent and answered one at a time.

    `security` (TLS, SASL) is applied at connect time: the TLS handshake, then SASL
    authentication, so every request the caller sends runs on an authenticated session."""

    def __init__(self, host: str, port: int, client_id: str | None = "kipcheck-raw", timeout: float = 15.0,
                 security: ClientSecurity | None = None):
        self.host, self.port, self.client_id, self.timeout = host, port, client_id, timeout
        self.security = security or PLAINTEXT
        self._peeked = b""  # a byte peer_state read on TLS (which has no MSG_PEEK), not yet consumed
        self._correlation = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] | None = None
        self.api_versions_version: int | None = None
        # (api_key, version, count) for every response that carried bytes after its body.
        self.trailing_bytes: list[tuple[int, int, int]] = []
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._sock = self.security.wrap(sock, host)
        except TimeoutError as exc:
            raise ConnectionError(f"TLS handshake with {host}:{port} timed out after {timeout:g}s") from exc
        if self.security.sasl:
            try:
                sasl.authenticate(self, self.security)
            except BaseException:
                self.close()
                raise

    @classmethod
    def connect(cls, bootstrap: str, **kwargs: Any) -> "RawClient":
        """The first bootstrap address that accepts (and authenticates, with `security=`)."""
        errors = []
        for host, port in parse_bootstrap(bootstrap):
            try:
                return cls(host, port, **kwargs)
            except ConnectionError as exc:
                errors.append(str(exc))
        raise ConnectionError("; ".join(errors))

    # -- sending ---------------------------------------------------------------------

    def send(self, payload: Any, *, expect_response: bool = True, timeout: float | None = None) -> Any:
        """Send a kio request payload; return the decoded response payload."""
        correlation_id = next(self._correlation)
        frame = framing.encode_request(payload, correlation_id, self.client_id)
        self._sock.sendall(frame)
        if not expect_response:
            _observe(self, payload, None)
            return None
        api_key, version = int(payload.__api_key__), int(payload.__version__)
        try:
            decoded = framing.decode_response_frame(self.read_frame(timeout), api_key, version)
        except BaseException:
            _observe(self, payload, None)  # sent and never answered: often the very request a broker died on
            raise
        if decoded.trailing_bytes:
            # Clients ignore bytes after a response body; keep them visible to checks.
            self.trailing_bytes.append((api_key, version, decoded.trailing_bytes))
        got_id, body = decoded.correlation_id, decoded.body
        if got_id != correlation_id:
            raise framing.PayloadDecodeError(f"correlation id {got_id} does not match request {correlation_id}")
        _observe(self, payload, body)
        return body

    def request(self, api_key: int, api_version: int, /, **fields: Any) -> Any:
        """Build the request of this key/version from fields and send it."""
        return self.send(payloads.build(framing.request_schema(api_key, api_version), **fields))

    def send_frame(self, frame: bytes, *, expect_response: bool = True, timeout: float | None = None) -> bytes | None:
        """Send raw bytes (size prefix included); return the raw response frame."""
        self._sock.sendall(frame)
        return self.read_frame(timeout) if expect_response else None

    def read_frame(self, timeout: float | None = None) -> bytes:
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        (size,) = _SIZE.unpack(self._recv_exactly(4))
        framing.check_frame_size(size)
        return self._recv_exactly(size)

    def _recv(self, n: int) -> bytes:
        if self._peeked:
            chunk, self._peeked = self._peeked[:n], self._peeked[n:]
            return chunk
        try:
            return self._sock.recv(n)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return b""  # the broker closed the TLS session

    def _recv_exactly(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self._recv(n - got)
            if not chunk:
                raise ConnectionClosed(f"{self.host}:{self.port} closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout: float = 2.0) -> bool:
        """True when the broker has closed this connection (EOF or reset) within timeout."""
        return self.peer_state(timeout) == "closed"

    def peer_state(self, timeout: float = 2.0) -> str:
        """"closed" (EOF or reset), "answered" (bytes arrived, left unread) or "open" (neither
        within timeout). On TLS, which has no MSG_PEEK, the byte read is kept for the next read."""
        self._sock.settimeout(timeout)
        try:
            if self._peeked:
                return "answered"
            if isinstance(self._sock, ssl.SSLSocket):
                self._peeked = self._recv(1)
                return "answered" if self._peeked else "closed"
            return "answered" if self._sock.recv(1, socket.MSG_PEEK) else "closed"
        except socket.timeout:
            return "open"
        except (ConnectionError, ssl.SSLError):
            return "closed"

    # -- versions --------------------------------------------------------------------

    def api_versions(self, version: int = 3) -> dict[int, tuple[int, int]]:
        """ApiVersions at `version`, downgrading as Kafka clients do: a broker that does not
        know the version answers with a v0 body carrying UNSUPPORTED_VERSION and its ranges.
        When that answer does not parse (librdkafka's mock sends a malformed one), step
        down one version at a time."""
        attempt: int | None = version
        while attempt is not None and attempt >= 0:
            try:
                resp = self.api_versions_response(attempt)
            except framing.PayloadDecodeError:
                attempt -= 1
                continue
            if resp.error_code == ErrorCode.unsupported_version:
                offered = {int(k.api_key): int(k.max_version) for k in resp.api_keys}
                attempt = min(offered.get(18, attempt - 1), attempt - 1)
                continue
            if resp.error_code != ErrorCode.none:
                raise RuntimeError(f"ApiVersions v{attempt} failed: {resp.error_code!r}")
            self._versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
            self.api_versions_version = attempt
            return self._versions
        raise RuntimeError(f"no ApiVersions version <= {version} answered in a form that parses")

    def api_versions_response(self, version: int) -> Any:
        fields = {"client_software_name": "kipcheck", "client_software_version": "0.1.0"}
        payload = payloads.build(framing.request_schema(18, version), **fields)
        correlation_id = next(self._correlation)
        self._sock.sendall(framing.encode_request(payload, correlation_id, self.client_id))
        frame = self.read_frame()
        try:
            _, body = framing.decode_response(frame, 18, version)
        except framing.PayloadDecodeError:
            _, body = framing.decode_response(frame, 18, 0)  # the v0 fallback answer
        return body

    def negotiate(self, api_key: int, highest: int | None = None) -> int | None:
        """Highest version both this broker and kio support (capped at `highest`), or None."""
        versions = self._versions if self._versions is not None else self.api_versions()
        if api_key not in versions:
            return None
        lo, hi = versions[api_key]
        if highest is not None:
            hi = min(hi, highest)
        for v in range(hi, lo - 1, -1):
            try:
                framing.request_schema(api_key, v)
                return v
            except framing.UnsupportedApi:
                continue
        return None

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClusterClient:
    """Raw clients to every broker of a cluster, discovered through Metadata."""

    def __init__(self, bootstrap: str, client_id: str | None = "kipcheck-raw", timeout: float = 15.0,
                 security: ClientSecurity | None = None):
        self.client_id, self.timeout, self.security = client_id, timeout, security or PLAINTEXT
        self.nodes: dict[int, tuple[str, int]] = {}
        self._clients: dict[int, RawClient] = {}
        self.bootstrap = self._first_answering(bootstrap)

    def _first_answering(self, bootstrap: str) -> RawClient:
        """The first bootstrap address whose broker answers Metadata. Accepting TCP is not
        enough: Docker's port proxy accepts for a container whose Kafka is still starting and
        then closes, and a client that stopped at that address could reach no broker at all
        until it came back (seen in CI: a share group's members expired while the node
        listed first restarted)."""
        errors = []
        for host, port in parse_bootstrap(bootstrap):
            try:
                client = self.connect_to(host, port)
            except ConnectionError as exc:
                errors.append(str(exc))
                continue
            try:
                self.bootstrap = client
                self.refresh()
                return client
            except OSError as exc:  # ConnectionClosed, reset, timeout
                client.close()
                errors.append(f"{host}:{port} accepted but gave no Metadata: {exc}")
        raise ConnectionError("; ".join(errors))

    def reconnect(self, bootstrap: str) -> None:
        """A new bootstrap connection: to the first of `bootstrap` that answers Metadata."""
        self.bootstrap.close()
        self.bootstrap = self._first_answering(bootstrap)

    def refresh(self, topics: list[str] | None = None) -> Any:
        md = self.metadata_from(self.bootstrap, topics)
        self.nodes = {int(b.node_id): (b.host, int(b.port)) for b in md.brokers}
        return md

    @staticmethod
    def metadata_from(client: RawClient, topics: list[str] | None = None) -> Any:
        """One broker's Metadata answer (each broker replays the metadata log on its own)."""
        version = client.negotiate(ApiKey.METADATA, 12)
        schema = framing.request_schema(ApiKey.METADATA, version)
        req = payloads.build(
            schema,
            topics=None if topics is None else tuple(
                payloads.build(payloads.nested(schema, "MetadataRequestTopic"), name=t, topic_id=None) for t in topics
            ),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return client.send(req)

    def node(self, node_id: int) -> RawClient:
        client = self._clients.get(node_id)
        if client is None:
            host, port = self.nodes[node_id]
            client = self._clients[node_id] = self.connect_to(host, port)
        return client

    def connect_to(self, host: str, port: int, **kwargs: Any) -> RawClient:
        """A new, separate connection with this cluster's security settings (caller closes it)."""
        kwargs.setdefault("client_id", self.client_id)
        kwargs.setdefault("timeout", self.timeout)
        return RawClient(host, port, security=self.security, **kwargs)

    def leader_for(self, topic: str, partition: int) -> RawClient:
        md = self.refresh([topic])
        for t in md.topics:
            if t.name == topic:
                for p in t.partitions:
                    if p.partition_index == partition and p.leader_id >= 0:
                        return self.node(int(p.leader_id))
        raise LookupError(f"no leader for {topic}-{partition}")

    def coordinator_for(self, key: str, key_type: int = 0, wait_s: float = 0.0) -> RawClient:
        """Client to the coordinator of a group (key_type 0) or transactional id (1).

        wait_s > 0 retries the retriable answers (COORDINATOR_NOT_AVAILABLE while Kafka
        creates __consumer_offsets, COORDINATOR_LOAD_IN_PROGRESS) until that deadline."""
        deadline = time.monotonic() + wait_s
        while True:
            error, node_id = self.find_coordinator(key, key_type)
            if error == 0:
                return self.node(node_id)
            if error not in _RETRIABLE_COORDINATOR_ERRORS or time.monotonic() >= deadline:
                raise RuntimeError(f"FindCoordinator({key!r}) failed: error {error}")
            time.sleep(0.2)

    def find_coordinator(self, key: str, key_type: int = 0) -> tuple[int, int]:
        """One FindCoordinator round trip: (error_code, node_id)."""
        version = self.bootstrap.negotiate(ApiKey.FIND_COORDINATOR, 6)
        if version >= 4:
            resp = self.bootstrap.request(ApiKey.FIND_COORDINATOR, version, key_type=key_type, coordinator_keys=(key,))
            c = resp.coordinators[0]
            return int(c.error_code), int(c.node_id)
        resp = self.bootstrap.request(ApiKey.FIND_COORDINATOR, version, key=key, key_type=key_type)
        return int(resp.error_code), int(resp.node_id)

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self.bootstrap.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
