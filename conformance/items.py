"""What the plugin reads off a collected test: whether it is a conformance suite test, its
requirement ids, the target spec it runs on, its name without parameters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from targets.target import TargetSpec

from conformance.state import state_of

SUITES_PARTS = ("conformance", "suites")


def in_suites(path: Path | str) -> bool:
    parts = Path(path).parts
    return any(parts[i : i + 2] == SUITES_PARTS for i in range(len(parts) - 1))


def requirement_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("requirement"):
        for arg in mark.args:
            if isinstance(arg, str) and arg not in ids:
                ids.append(arg)
    return ids


def item_spec(item: pytest.Item) -> TargetSpec | None:
    """The target spec the test runs on (its ``target`` parameter), else None."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        value = callspec.params.get("target")
        if isinstance(value, TargetSpec):
            return value
    if "target" in getattr(item, "fixturenames", ()):
        specs = state_of(item.config).specs
        return specs[0] if specs else None
    return None


def is_recorded(item: pytest.Item) -> bool:
    """Does the test get a result row: a suite test, one naming requirements, or one on a target."""
    return (
        in_suites(item.path)
        or item.get_closest_marker("requirement") is not None
        or "target" in getattr(item, "fixturenames", ())
    )


def name_without_params(item: pytest.Item) -> str:
    """The test's name in its module (``Class::test``), without the parameter ids."""
    name = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return re.sub(r"\[.*\]$", "", name)
