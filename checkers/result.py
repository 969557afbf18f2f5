"""Check results and their composition (pure data, JSON-ready).

Validity is three-valued, as in Jepsen: ``True`` (no error outside the allowed set),
``False`` (at least one error type the policy does not allow), ``"unknown"`` (nothing
disallowed was found but the history cannot prove correctness either, e.g. nothing
was ever read, or acknowledged writes stayed unseen). Composition takes the worst:
False beats "unknown" beats True.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

UNKNOWN = "unknown"
Validity = Any  # True | False | "unknown"

_RANK = {True: 0, UNKNOWN: 1, False: 2}


def merge_valid(values: Iterable[Validity]) -> Validity:
    """Worst validity of ``values`` (True for none)."""
    worst: Validity = True
    for v in values:
        if v not in _RANK:
            raise ValueError(f"validity must be True, False or 'unknown', got {v!r}")
        if _RANK[v] > _RANK[worst]:
            worst = v
    return worst


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one checker over one history.

    ``counts`` maps every error type found to its number of error maps, ``examples``
    keeps the first few maps of each type, ``bad_error_types`` are the found types the
    policy did not allow, ``unknown_because`` says why a non-false result is unknown.
    """

    valid: Validity
    counts: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, list[dict]] = field(default_factory=dict)
    bad_error_types: tuple[str, ...] = ()
    allowed_error_types: tuple[str, ...] = ()
    unknown_because: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def error_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.counts))

    def to_dict(self) -> dict:
        return {
            "valid": self.valid,
            "error_types": list(self.error_types),
            "bad_error_types": list(self.bad_error_types),
            "allowed_error_types": list(self.allowed_error_types),
            "unknown_because": list(self.unknown_because),
            "counts": dict(self.counts),
            "examples": {k: list(v) for k, v in self.examples.items()},
            "stats": dict(self.stats),
        }


def decide(errors: Mapping[str, list[dict]], allowed: Iterable[str],
           indeterminate: Iterable[str] = (), *, evidence: bool = True,
           max_examples: int = 3, stats: Mapping[str, Any] | None = None) -> CheckResult:
    """Turn grouped error maps into a ``CheckResult`` by policy.

    ``allowed`` types never affect validity; ``indeterminate`` types (not allowed)
    make the result "unknown"; every other type found makes it False. ``evidence``
    False (the history observed nothing) also makes an otherwise clean result unknown.
    """
    allowed = frozenset(allowed)
    indeterminate = frozenset(indeterminate) - allowed
    found = {t: errs for t, errs in errors.items() if errs}
    bad = tuple(sorted(t for t in found if t not in allowed and t not in indeterminate))
    because = [f"{t} found" for t in sorted(found) if t in indeterminate]
    if not evidence:
        because.append("the history observed no reads")
    if bad:
        valid: Validity = False
    elif because:
        valid = UNKNOWN
    else:
        valid = True
    return CheckResult(
        valid=valid,
        counts={t: len(errs) for t, errs in sorted(found.items())},
        examples={t: list(errs[:max_examples]) for t, errs in sorted(found.items())},
        bad_error_types=bad,
        allowed_error_types=tuple(sorted(allowed)),
        unknown_because=tuple(because) if not bad else (),
        stats=dict(stats or {}),
    )


def compose(results: Mapping[str, CheckResult | Mapping]) -> dict:
    """Named sub-results under one verdict: ``{"valid": worst, "results": {...}}``."""
    out = {}
    for name, r in results.items():
        out[name] = r.to_dict() if isinstance(r, CheckResult) else dict(r)
    return {"valid": merge_valid(r["valid"] for r in out.values()), "results": out}
