"""Effectiveness probes: does a node answer a raw ApiVersions, how long is a round trip."""

from __future__ import annotations

import time

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from reference_impl.client.raw_client import RawClient
from reference_impl.protocol import framing


def api_versions_ok(host: str, port: int, timeout_s: float = 2.0) -> tuple[bool, str]:
    """One fresh connection and an ApiVersions round trip: (answered, what happened)."""
    t0 = time.monotonic()
    try:
        with RawClient(host, port, timeout=timeout_s) as client:
            client.api_versions(0)
    except Exception as exc:  # refused, reset, timed out: the node did not answer
        return False, f"ApiVersions to {host}:{port} failed after {time.monotonic() - t0:.2f}s: {type(exc).__name__}"
    return True, f"ApiVersions to {host}:{port} answered in {time.monotonic() - t0:.3f}s"


def api_versions_seconds(host: str, port: int, timeout_s: float = 10.0) -> float | None:
    """Seconds of one ApiVersions round trip on a fresh connection (None: no answer)."""
    t0 = time.monotonic()
    try:
        with RawClient(host, port, timeout=timeout_s) as client:
            client.api_versions(0)
    except Exception:
        return None
    return time.monotonic() - t0


def wait_answering(host: str, port: int, timeout_s: float) -> bool:
    """Poll until the node answers ApiVersions (after a heal)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if api_versions_ok(host, port, 2.0)[0]:
            return True
        time.sleep(0.2)
    return False


def api_versions_exchange(host: str, port: int, timeout_s: float = 10.0) -> tuple[float, int] | None:
    """(seconds, response bytes) of one ApiVersions v0 round trip on a fresh connection."""
    t0 = time.monotonic()
    try:
        with RawClient(host, port, timeout=timeout_s) as client:
            response = client.send_frame(framing.encode_request(ApiVersionsRequest(), 1))
    except Exception:
        return None
    return time.monotonic() - t0, len(response or b"")
