"""Per-request (L7) faults: hold, delay, drop or answer with an error one chosen request.

A ``RequestFault`` matches requests by api key, version, node and (decoded only when
asked for) transactional id; a ``RequestFaultHook`` holds the active faults and counts
what each matched, so a fault that matched nothing is reported as not effective. The
hook is pure bookkeeping: the reference broker and the capture proxy call ``decide``
for every request and carry out the verdict themselves (an asyncio sleep, a closed
connection, an error response built by ``error_response_frame``).

Holding EndTxn is the starting condition of KAFKA-17754 (a late EndTxn landing on a
later transaction), the fault Jepsen's Bufstream analysis used.
"""

from __future__ import annotations

import datetime
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.protocol import framing, payloads

ACTIONS = ("hold", "delay", "drop", "error")
"""hold/delay: answer after ``ms`` (the request reaches the broker late); drop: close the
connection without forwarding; error: answer ``error_code`` without forwarding."""


@dataclass(frozen=True)
class RequestMatch:
    api_key: int
    versions: tuple[int, int] | None = None
    node: int | None = None
    transactional_id: str | None = None

    def matches(self, node_id: int, api_key: int, api_version: int, frame: bytes) -> bool:
        if api_key != self.api_key or (self.node is not None and node_id != self.node):
            return False
        if self.versions is not None and not self.versions[0] <= api_version <= self.versions[1]:
            return False
        return self.transactional_id is None or transactional_id_of(frame) == self.transactional_id


@dataclass
class RequestFault:
    """One active fault; ``limit`` requests at most (None: every match while active)."""

    match: RequestMatch
    action: str
    ms: int = 0
    error_code: ErrorCode = ErrorCode.unknown_server_error
    limit: int | None = 1
    matched: int = 0
    fault_id: int = field(default_factory=lambda: next(_IDS))

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"request fault action must be one of {', '.join(ACTIONS)}, got {self.action!r}")


_IDS = itertools.count(1)


@dataclass(frozen=True)
class Verdict:
    action: str
    delay_s: float = 0.0
    error_code: ErrorCode | None = None


class RequestFaultHook:
    """The active request faults of one broker or proxy; thread-safe (nemesis thread vs event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[int, RequestFault] = {}

    def add(self, fault: RequestFault) -> RequestFault:
        with self._lock:
            self._faults[fault.fault_id] = fault
        return fault

    def remove(self, fault: RequestFault) -> int:
        """Deactivate; returns how many requests it matched."""
        with self._lock:
            self._faults.pop(fault.fault_id, None)
        return fault.matched

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def decide(self, node_id: int, api_key: int, api_version: int, frame: bytes) -> Verdict | None:
        with self._lock:
            for fault in self._faults.values():
                if fault.limit is not None and fault.matched >= fault.limit:
                    continue
                if fault.match.matches(node_id, api_key, api_version, frame):
                    fault.matched += 1
                    return Verdict(fault.action, fault.ms / 1000.0, fault.error_code)
        return None

    def error_frame(self, api_key: int, api_version: int, correlation_id: int, error_code: ErrorCode) -> bytes:
        return error_response_frame(api_key, api_version, correlation_id, error_code)


def transactional_id_of(frame: bytes) -> str | None:
    """The request's transactional_id field, if its API has one (decoded only when asked)."""
    try:
        body = framing.decode_request(frame, strict=False).body
    except Exception:
        return None
    return payloads.get(body, "transactional_id")


def error_response_frame(api_key: int, api_version: int, correlation_id: int, error_code: ErrorCode) -> bytes:
    """A size-prefixed response carrying ``error_code`` at top level, for APIs whose response
    has one (EndTxn, InitProducerId, AddOffsetsToTxn, FindCoordinator v0-3, JoinGroup ...)."""
    cls = framing.response_schema(api_key, api_version)
    if not payloads.has_field(cls, "error_code"):
        raise ValueError(f"api {api_key} v{api_version}: no top-level error_code to answer with")
    try:
        body = payloads.build(cls, **_ERROR_DEFAULTS, error_code=error_code)
    except TypeError as exc:  # more required fields than a bare error answer fills
        raise ValueError(f"api {api_key} v{api_version}: cannot answer with a bare error: {exc}") from None
    return framing.encode_response(body, correlation_id, api_key, api_version)


_ERROR_DEFAULTS: dict[str, Any] = {
    "throttle_time": datetime.timedelta(0), "error_message": None, "producer_id": -1, "producer_epoch": -1,
    "ongoing_txn_producer_id": -1, "ongoing_txn_producer_epoch": -1,
}

