"""Registry of API handlers: one small handler per Kafka API, as in franz-go's kfake.

A handler translates one decoded request into calls on the model and builds the
response for the negotiated version. It may be a coroutine when the request waits
(Fetch max wait, JoinGroup rebalance); it never touches sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from reference_impl.model.broker_state import ReferenceState
from reference_impl.protocol import framing, payloads
from reference_impl.server.runtime import BrokerRuntime


@dataclass(slots=True)
class RequestContext:
    """Everything a handler may know about the request besides its body."""

    runtime: BrokerRuntime
    node_id: int
    connection_id: int
    client_host: str
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Per-connection scratch space handlers may use (e.g. share sessions tied to a connection).
    connection_state: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> ReferenceState:
        return self.runtime.state

    @property
    def now_ms(self) -> int:
        return self.runtime.clock.now_ms()

    @property
    def response_cls(self) -> type:
        return framing.response_schema(self.api_key, self.api_version)

    def response(self, **fields: Any) -> Any:
        """Top-level response of the negotiated version."""
        return payloads.build(self.response_cls, **fields)

    def nested(self, class_name: str, **fields: Any) -> Any:
        """Nested response structure of the negotiated version."""
        return payloads.build(payloads.nested(self.response_cls, class_name), **fields)


class CloseConnection(Exception):
    """Raised by a handler when Kafka closes the connection instead of answering
    (e.g. a Produce with acks=0 that failed, so the producer notices)."""


Handle = Callable[[RequestContext, Any], Any | Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: Handle
    # Whether the api is enabled for a BrokerConfig (finalized features); None = always.
    # Kafka's ApiVersionManager hides such apis from ApiVersions (e.g. KIP-1289's key 93
    # below share.version 2).
    enabled: Callable[[Any], bool] | None = None

    def enabled_for(self, config: Any) -> bool:
        return self.enabled is None or (config is not None and bool(self.enabled(config)))


HANDLERS: dict[int, ApiHandler] = {}


def handles(
    api_key: int, min_version: int, max_version: int, *, enabled: Callable[[Any], bool] | None = None
) -> Callable[[Handle], Handle]:
    """Register a handler for the versions it implements (checked against kio's schemas);
    `enabled(config)` gates a feature-dependent api."""

    def register(fn: Handle) -> Handle:
        for v in (min_version, max_version):
            framing.request_schema(api_key, v)  # raises UnsupportedApi if kio lacks it
        if api_key in HANDLERS:
            raise ValueError(f"api key {api_key} registered twice")
        HANDLERS[api_key] = ApiHandler(api_key, min_version, max_version, fn, enabled)
        return fn

    return register


def lookup(api_key: int, api_version: int) -> ApiHandler | None:
    h = HANDLERS.get(api_key)
    if h is None or not (h.min_version <= api_version <= h.max_version):
        return None
    return h
