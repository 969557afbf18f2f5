"""Differential runner: run one scenario on the target and on the reference, compare.

A *scenario* is a function ``scenario(target, ids) -> dict`` that drives a cluster and
returns JSON-able observations. ``ids`` is a `UniqueIds` factory; the target run and
the reference run get factories with the same base, so names (topics, groups,
transactional ids) come out identical on both sides and need no normalization.

Differences between the two normalized observations are *divergences*: they are
recorded (with the requirement id) on the test's result row and never decide the
verdict. The verdict comes from the requirement's oracle, i.e. the test's own
assertions on ``result.target``.

In tests use the ``differential`` fixture::

    @pytest.mark.requirement("PROTO.META.004")
    def test_unknown_topic(differential):
        res = differential.run(unknown_topic_scenario)
        assert res.target["error_code"] == 3

Outside pytest, `run_differential(scenario, target, reference)` does the same without
recording.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from targets.target import NotSupportedByTarget, Target
from clients.normalize import Difference, Normalizer, compare, jsonable

Scenario = Callable[[Target, "UniqueIds"], Mapping[str, Any]]

# Kafka topic / group names: [a-zA-Z0-9._-], at most 249 characters.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 249


def safe_name(text: str, limit: int = 60) -> str:
    """A Kafka-name-safe slug of text, shortened with a hash when longer than limit."""
    slug = _NAME_UNSAFE.sub("_", text).strip("_") or "x"
    if len(slug) > limit:
        digest = hashlib.sha1(slug.encode()).hexdigest()[:8]
        slug = f"{slug[: limit - 9]}_{digest}"
    return slug


class UniqueIds:
    """Factory of unique, Kafka-safe names under one base.

    ``ids.topic()`` -> ``<base>-topic-1``, then ``-topic-2``...; likewise ``group()``,
    ``transactional_id()``, ``client_id()``, ``instance_id()``, and ``ids("anything")``.
    Two factories with the same base produce the same sequence.
    """

    def __init__(self, base: str) -> None:
        self.base = safe_name(base, limit=180)
        self._counters: dict[str, itertools.count] = {}

    def __call__(self, kind: str = "id") -> str:
        kind = safe_name(kind, limit=40)
        n = next(self._counters.setdefault(kind, itertools.count(1)))
        return f"{self.base}-{kind}-{n}"[:MAX_NAME]

    def topic(self) -> str:
        return self("topic")

    def group(self) -> str:
        return self("group")

    def transactional_id(self) -> str:
        return self("txn")

    def client_id(self) -> str:
        return self("client")

    def instance_id(self) -> str:
        return self("instance")

    def child(self, suffix: str) -> "UniqueIds":
        """A factory with base ``<base>-<suffix>`` (independent counters)."""
        return UniqueIds(f"{self.base}-{suffix}")

    def __repr__(self) -> str:
        return f"UniqueIds({self.base!r})"


@dataclass
class DifferentialResult:
    """Outcome of one differential run.

    target / reference: the raw observations each side's scenario returned (reference is
    None when the reference was not run). differences: where the normalized observations
    differ. compared: whether a comparison happened; note says why not, or what went
    wrong on the reference side.
    """

    scenario: str
    requirement: str | None
    target: Any
    reference: Any | None = None
    target_normalized: Any = None
    reference_normalized: Any = None
    differences: list[Difference] = field(default_factory=list)
    compared: bool = False
    note: str | None = None

    @property
    def diverged(self) -> bool:
        return bool(self.differences)

    def divergences(self) -> list[dict[str, Any]]:
        """Result-row divergence entries: {"requirement", "what", "target", "reference"}."""
        return [
            {"requirement": self.requirement, "what": f"{self.scenario} {d.path}", "target": d.target, "reference": d.reference}
            for d in self.differences
        ]


def _scenario_name(scenario: Callable[..., Any]) -> str:
    return getattr(scenario, "__name__", None) or type(scenario).__name__


def _make_normalizer(options: Mapping[str, Any] | None, normalizer: Callable[[], Normalizer] | None) -> Normalizer:
    if normalizer is not None:
        return normalizer()
    return Normalizer(**dict(options or {}))


def run_differential(
    scenario: Scenario,
    target: Target,
    reference: Target | Callable[[], Target] | None,
    *,
    ids_base: str = "kc-diff",
    requirement: str | None = None,
    ignore_keys: Iterable[str] = (),
    keep_keys: Iterable[str] = (),
    normalizer: Callable[[], Normalizer] | None = None,
    skip_reason: str | None = None,
) -> DifferentialResult:
    """Run scenario on target and (unless skip_reason or no reference) on reference.

    Exceptions from the target's run propagate (they belong to the test). Failures on
    the reference side (it cannot start, raises, lacks a capability) do not: they become
    a single recorded difference at path ``$`` plus a warning, so a reference bug never
    fails a test against another target.
    """
    name = _scenario_name(scenario)
    opts = {"ignore_keys": tuple(ignore_keys), "keep_keys": tuple(keep_keys)}
    obs_t = scenario(target, UniqueIds(ids_base))
    result = DifferentialResult(name, requirement, obs_t)
    if skip_reason is not None:
        result.note = skip_reason
        return result
    if reference is None:
        result.note = "no reference target"
        return result
    try:
        ref = reference() if callable(reference) and not isinstance(reference, Target) else reference
        if ref is target:
            result.note = "target is the reference"
            return result
        obs_r = scenario(ref, UniqueIds(ids_base))
    except NotSupportedByTarget as exc:
        return _reference_failed(result, f"reference does not support this scenario: {exc.reason}")
    except Exception as exc:  # noqa: BLE001 - a reference problem must not fail the target's test
        return _reference_failed(result, f"reference run failed: {type(exc).__name__}: {exc}")
    result.reference = obs_r
    result.target_normalized = _make_normalizer(opts, normalizer)(obs_t)
    result.reference_normalized = _make_normalizer(opts, normalizer)(obs_r)
    result.differences = compare(result.target_normalized, result.reference_normalized)
    result.compared = True
    return result


def _reference_failed(result: DifferentialResult, message: str) -> DifferentialResult:
    result.note = message
    result.target_normalized = jsonable(result.target)
    result.differences = [Difference("$", "<ran>", f"<{message}>")]
    warnings.warn(f"differential {result.scenario}: {message}", RuntimeWarning, stacklevel=3)
    return result


class Differential:
    """The ``differential`` fixture: runs scenarios for one test and records divergences.

    Built by the pytest plugin with the test's target, a lazy reference provider, the
    test's requirement ids and a recorder that appends to the test's result row.
    """

    def __init__(
        self,
        target: Target,
        reference: Callable[[], Target] | None,
        *,
        enabled: bool = True,
        ids_base: str = "kc-diff",
        requirements: Iterable[str] = (),
        record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.target = target
        self._reference = reference
        self.enabled = enabled
        self.ids_base = ids_base
        self.requirements = tuple(requirements)
        self._record = record
        self._runs = itertools.count(1)
        self.results: list[DifferentialResult] = []

    def skip_reason(self) -> str | None:
        if self.target.kind == "reference":
            return "target is the reference"
        if not self.enabled:
            return "differential comparison disabled (--no-differential)"
        if self._reference is None:
            return "no reference target"
        return None

    def run(
        self,
        scenario: Scenario,
        requirement: str | None = None,
        *,
        ignore_keys: Iterable[str] = (),
        keep_keys: Iterable[str] = (),
        normalizer: Callable[[], Normalizer] | None = None,
    ) -> DifferentialResult:
        """Run scenario on the test's target and on the reference; record differences.

        requirement: the catalog id differences are filed under; defaults to the test's
        only requirement id (required when the test claims several).
        ignore_keys / keep_keys: passed to `Normalizer`; normalizer: a factory replacing it.
        """
        if requirement is None:
            if len(self.requirements) != 1:
                raise ValueError(
                    "differential.run(...) needs requirement=<id> when the test claims "
                    f"{len(self.requirements)} requirement ids {list(self.requirements)}"
                )
            requirement = self.requirements[0]
        elif self.requirements and requirement not in self.requirements:
            raise ValueError(f"requirement {requirement!r} is not among the test's requirement ids {list(self.requirements)}")
        run_no = next(self._runs)
        result = run_differential(
            scenario,
            self.target,
            self._reference,
            ids_base=f"{self.ids_base}{run_no}",
            requirement=requirement,
            ignore_keys=ignore_keys,
            keep_keys=keep_keys,
            normalizer=normalizer,
            skip_reason=self.skip_reason(),
        )
        self.results.append(result)
        if self._record is not None:
            for entry in result.divergences():
                self._record(entry)
        return result
