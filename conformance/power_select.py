"""pytest plugin (``-p conformance.power_select``): run only the conformance tests that claim
one of the given catalog ids.

  --requirement-ids ID[,ID...]   keep tests whose requirement(...) marker names any of them

Used by conformance.power (one pytest run per seeded bug, over the bug's ids). A plugin of
its own, so the kipcheck plugin's collection hooks stay untouched.
"""

from __future__ import annotations

import pytest

from conformance.items import requirement_ids


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("kipcheck").addoption(
        "--requirement-ids",
        dest="kipcheck_requirement_ids",
        default=None,
        metavar="IDS",
        help="only run tests whose requirement marker names one of these comma-separated catalog ids",
    )


def selected_ids(text: str | None) -> frozenset[str]:
    return frozenset(i.strip() for i in (text or "").split(",") if i.strip())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = selected_ids(config.getoption("kipcheck_requirement_ids"))
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        (keep if wanted & set(requirement_ids(item)) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
