"""Finalized feature levels and their updates (UpdateFeatures, KIP-584 / KIP-778).

Pure: validates a whole UpdateFeatures request against the supported ranges and the
current levels, all or nothing, as Kafka's FeatureControlManager does. A level of 0 removes
the finalized feature. Downgrades need an explicit downgrade type (KIP-778 UpgradeType:
1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE; v0's AllowDowngrade maps to 2).

`blockers` lets other models refuse a level change they cannot survive: KIP-1289's
"Downgrade" section has the broker refuse lowering share.version below 2 while any record
is TX_PENDING. An UNSAFE_DOWNGRADE skips them, as Kafka's unsafe downgrade skips its
metadata-loss checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from kio.schema.errors import ErrorCode

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
# (feature, new level, current level) -> a reason to refuse, or None.
Blocker = Callable[[str, int, int], str | None]


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int = UPGRADE


@dataclass(frozen=True, slots=True)
class FeatureResult:
    feature: str
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None


def _check(update: FeatureUpdate, current: Mapping[str, int], supported: Mapping[str, tuple[int, int]],
           blockers: Sequence[Blocker]) -> str | None:
    name, level = update.feature, update.level
    if name not in supported:
        return f"The broker does not support feature {name}."
    lo, hi = supported[name]
    have = int(current.get(name, 0))
    if level < 0 or (level != 0 and not lo <= level <= hi):
        return f"Level {level} of {name} is outside the supported range {lo}..{hi}."
    if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"Unknown upgrade type {update.upgrade_type}."
    if level < have and update.upgrade_type == UPGRADE:
        return f"Can't downgrade {name} from {have} to {level} without a downgrade type."
    if level > have and update.upgrade_type != UPGRADE:
        return f"Can't upgrade {name} from {have} to {level} with a downgrade type."
    for blocker in blockers if update.upgrade_type != UNSAFE_DOWNGRADE else ():
        reason = blocker(name, level, have)
        if reason:
            return reason
    return None


def plan(
    updates: Sequence[FeatureUpdate],
    current: Mapping[str, int],
    supported: Mapping[str, tuple[int, int]],
    blockers: Sequence[Blocker] = (),
) -> tuple[list[FeatureResult], dict[str, int] | None]:
    """Per-feature results and the new finalized levels (None when any update is refused:
    nothing is applied)."""
    results: list[FeatureResult] = []
    seen: set[str] = set()
    new = dict(current)
    for u in updates:
        reason = "The feature is listed more than once." if u.feature in seen else _check(u, current, supported, blockers)
        seen.add(u.feature)
        if reason:
            results.append(FeatureResult(u.feature, ErrorCode.invalid_update_version, reason))
            continue
        results.append(FeatureResult(u.feature))
        if u.level == 0:
            new.pop(u.feature, None)
        else:
            new[u.feature] = u.level
    if any(r.error_code != ErrorCode.none for r in results):
        return results, None
    return results, new
