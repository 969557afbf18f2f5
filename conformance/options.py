"""The kipcheck plugin's command-line options and the target specs they select.

``--target`` (or ``KIPCHECK_TARGETS``) names the targets every test runs on;
``--scoped-target SPEC PATHS`` adds a target for the tests under PATHS only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from targets.target import KINDS, TargetSpec, parse_target_spec

DEFAULT_TARGET = "reference"
ENV_TARGETS = "KIPCHECK_TARGETS"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kipcheck", "kipcheck conformance suite")
    group.addoption(
        "--target",
        action="append",
        dest="kipcheck_targets",
        default=None,
        metavar="SPEC",
        help="target to run conformance tests against, e.g. reference, kafka-native:4.1.0, "
        "testcontainers:apache/kafka:3.9.0, external:HOST:PORT (repeatable; default: "
        f"${ENV_TARGETS} or 'reference')",
    )
    group.addoption(
        "--scoped-target",
        action="append",
        nargs=2,
        dest="kipcheck_scoped_targets",
        default=None,
        metavar=("SPEC", "PATHS"),
        help="also run SPEC, but only for tests under PATHS (comma-separated paths relative to the "
        "rootdir, e.g. conformance/suites/protocol,conformance/suites/kip98; a path written !PATH is "
        "left out, and PATHS of only such paths mean everything else); repeatable",
    )
    group.addoption(
        "--kipcheck-results",
        dest="kipcheck_results",
        default=None,
        metavar="DIR",
        help="write result rows (results-<worker>.jsonl) and target descriptions (targets-<worker>.json) to DIR",
    )
    group.addoption(
        "--no-differential",
        action="store_true",
        dest="kipcheck_no_differential",
        default=False,
        help="do not run differential scenarios on the reference target",
    )
    group.addoption(
        "--kipcheck-catalog",
        dest="kipcheck_catalog",
        default=None,
        metavar="DIR",
        help="requirement catalog directory (default: the packaged conformance/catalog)",
    )
    group.addoption(
        "--kipcheck-deadline-scale",
        dest="kipcheck_deadline_scale",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="multiply every test's deadline (marker or default) by FACTOR (default: 1)",
    )
    group.addoption(
        "--kipcheck-deadline",
        dest="kipcheck_deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give every test this deadline, whatever its marker says",
    )


def split_specs(text: str) -> list[str]:
    """Split a comma-separated spec list; pieces that do not start with a target kind
    continue the previous spec (``external:h1:9092,h2:9092``)."""
    out: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        kind = piece.split(":", 1)[0]
        if kind not in KINDS and out:
            out[-1] = f"{out[-1]},{piece}"
        else:
            out.append(piece)
    return out


def selected_specs(config: pytest.Config) -> list[TargetSpec]:
    raw: list[str] = []
    cli = config.getoption("kipcheck_targets")
    if cli:
        for value in cli:
            raw.extend(split_specs(value))
    elif os.environ.get(ENV_TARGETS, "").strip():
        raw.extend(split_specs(os.environ[ENV_TARGETS]))
    if not raw:
        raw = [DEFAULT_TARGET]
    raw.extend(text for text, _ in scoped_paths(config))
    specs: list[TargetSpec] = []
    seen: set[str] = set()
    for text in raw:
        try:
            spec = parse_target_spec(text)
        except ValueError as exc:
            raise pytest.UsageError(f"kipcheck: bad target spec: {exc}") from None
        if spec.raw not in seen:
            seen.add(spec.raw)
            specs.append(spec)
    return specs


@dataclass(frozen=True)
class Scope:
    """The tests a scoped target runs: those under an included path (every test when none
    is named) and under no excluded one."""

    included: tuple[Path, ...]
    excluded: tuple[Path, ...] = ()

    def covers(self, test_path: Path) -> bool:
        path = test_path.resolve()
        return (not self.included or _under(path, self.included)) and not _under(path, self.excluded)


def _under(path: Path, prefixes: tuple[Path, ...]) -> bool:
    return any(path == p or p in path.parents for p in prefixes)


def scoped_paths(config: pytest.Config) -> list[tuple[str, Scope]]:
    """``--scoped-target SPEC PATHS``: (spec text, scope) pairs; ``!PATH`` excludes."""
    root = Path(str(config.rootpath))
    out = []
    for text, paths in config.getoption("kipcheck_scoped_targets") or ():
        entries = [p.strip() for p in paths.split(",") if p.strip().lstrip("!")]
        if not entries:
            raise pytest.UsageError(f"kipcheck: --scoped-target {text} needs at least one path")
        included = tuple((root / p).resolve() for p in entries if not p.startswith("!"))
        excluded = tuple((root / p[1:].strip()).resolve() for p in entries if p.startswith("!"))
        out.append((text.strip(), Scope(included, excluded)))
    return out


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    if workerinput:
        return str(workerinput.get("workerid", "main"))
    return "main"


def is_xdist_worker(config: pytest.Config) -> bool:
    return getattr(config, "workerinput", None) is not None
