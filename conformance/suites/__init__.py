"""Conformance suites: one module per area, every test marked with
``@pytest.mark.requirement(<catalog ids>)``. See docs/conformance.md.

Helpers for capability gating: they raise `NotSupportedByTarget`, which the kipcheck
plugin reports as the verdict ``not_supported`` (never a pass or a fail).
"""

from __future__ import annotations

from targets.target import Capabilities, NotSupportedByTarget, Target

__all__ = ["NotSupportedByTarget", "require_api", "require_feature", "require_nodes"]


def require_api(capabilities: Capabilities, api_key: int, version: int | None = None, what: str = "") -> int:
    """Raise NotSupportedByTarget unless the target advertises api_key (at version, when
    given); return the highest advertised version."""
    label = what or f"api key {api_key}"
    if api_key not in capabilities.api_versions:
        raise NotSupportedByTarget(f"{label} is not advertised in ApiVersions")
    lo, hi = capabilities.api_versions[api_key]
    if version is not None and not lo <= version <= hi:
        raise NotSupportedByTarget(f"{label} v{version} is not advertised (target supports v{lo}-v{hi})")
    return hi


def require_feature(capabilities: Capabilities, name: str, level: int = 1) -> int:
    """Raise NotSupportedByTarget unless feature `name` is finalized at >= level."""
    have = capabilities.feature(name)
    if have < level:
        raise NotSupportedByTarget(f"feature {name}={level} is not finalized (target has {name}={have})")
    return have


def require_nodes(target: Target, count: int) -> None:
    """Raise NotSupportedByTarget unless the target has at least `count` brokers."""
    have = len(target.node_ids)
    if have < count:
        raise NotSupportedByTarget(f"needs {count} brokers, target {target.name} has {have}")
