"""The gate of the suites for KIPs no Apache Kafka release has (KIP-1289, the round-trip
draft): a test runs only where the target offers the capability, else it is "not supported
by target" with the reason read from the wire. On the reference the capability is switched on
first (UpdateFeatures), and what to restore afterwards is returned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from targets.target import NotSupportedByTarget


def require_capability(
    target: Any,
    cc: Any,
    missing: Callable[[Any], str | None],
    enable_on_reference: Callable[[Any, Any], Any],
) -> Any:
    """NotSupportedByTarget(reason) unless `missing(cc.bootstrap)` is None, after enabling the
    capability on the reference; returns the level to restore afterwards (or None)."""
    restore = enable_on_reference(target, cc) if missing(cc.bootstrap) is not None else None
    reason = missing(cc.bootstrap)
    if reason is not None:
        raise NotSupportedByTarget(reason)
    return restore
