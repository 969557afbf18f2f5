"""The client suites kipcheck can run, by name (`--suite NAME[:VERSION]`)."""

from __future__ import annotations

from pathlib import Path

from client_suites.franz_go.suite import FranzGo
from client_suites.runner import ClientSuite

SUITES = {FranzGo.name: FranzGo}


class UnknownSuite(ValueError):
    """A suite name or version kipcheck has no adapter or pin for."""


def suite_for(text: str, workdir: Path) -> ClientSuite:
    """The adapter for `NAME[:VERSION]`; only the pinned version of each suite is built."""
    name, _, version = text.partition(":")
    cls = SUITES.get(name)
    if cls is None:
        raise UnknownSuite(f"unknown client suite {name!r} (known: {', '.join(sorted(SUITES))})")
    if version and version.lstrip("v") != cls.version:
        raise UnknownSuite(f"{name} {version} is not pinned (pinned: {cls.version}; the pin lives in "
                           f"client_suites/{name.replace('-', '_')}/go.mod)")
    return cls(workdir / name)
