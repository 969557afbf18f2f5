"""Preflight: before any test runs, can each target be reached or started at all?

A run against an unreachable cluster must say so in one line within seconds, not fail 88
tests one traceback at a time. `external:` targets get a TCP connect plus an ApiVersions
round trip through the target's own start() (so its security config, from
KIPCHECK_EXTERNAL_CONFIG or config=, is honoured) with a short timeout; local kinds get
cheap prerequisite checks (the real start happens in the workers).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Callable

from targets.factory import create_target
from targets.go_build import GoBuildError
from targets.kfake.build import binary_path, go_toolchain
from targets.tansu.build import TansuBuildError, ensure_binary as ensure_tansu
from targets.target import parse_target_spec

PREFLIGHT_TIMEOUT_S = 5.0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _external(spec: str, timeout: float) -> str | None:
    target = create_target(spec)
    target.timeout = min(getattr(target, "timeout", timeout), timeout)
    try:
        target.start()
    except Exception as exc:  # noqa: BLE001 - any failure is the one-line reason
        return _one_line(exc)
    finally:
        try:
            target.stop()
        except Exception:  # noqa: BLE001
            pass
    return None


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return None
    if shutil.which("java"):
        return None
    return "no Java runtime: kafka-native needs `java` on PATH or JAVA_HOME (e.g. apt-get install openjdk-17-jre-headless)"


def _kfake() -> str | None:
    """kfake runs a Go program: built already, or a Go toolchain to build it."""
    if binary_path().exists():
        return None
    try:
        go_toolchain()
    except GoBuildError as exc:
        return str(exc)
    return None


def _tansu() -> str | None:
    """Tansu takes ~25 minutes to build: built here, in the CLI's process, so its progress
    lines reach the user's terminal (a pytest worker's stderr would not); missing cargo or a
    failed build is the one-line reason."""
    try:
        ensure_tansu()
    except TansuBuildError as exc:
        return _one_line(exc)
    return None


def _module(name: str, why: str) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else f"Python package {name} is not installed ({why})"

    return check


LOCAL_CHECKS: dict[str, list[Callable[[], str | None]]] = {
    "reference": [_module("reference_impl.server.broker_server", "the reference broker")],
    "kafka-native": [_java],
    "librdkafka-mock": [_module("confluent_kafka", "librdkafka's mock cluster comes with confluent-kafka")],
    "kfake": [_kfake],
    "tansu": [_tansu],
    "testcontainers": [],  # no Docker engine: its tests are skipped with the reason, by design
}


def check_target(spec: str, timeout: float = PREFLIGHT_TIMEOUT_S) -> str | None:
    """None when `spec` looks usable, else a one-line reason."""
    kind = parse_target_spec(spec).kind
    if kind == "external":
        return _external(spec, timeout)
    for check in LOCAL_CHECKS.get(kind, []):
        reason = check()
        if reason:
            return reason
    return None


def check_all(specs: list[str], timeout: float = PREFLIGHT_TIMEOUT_S) -> dict[str, str]:
    """spec -> reason, for the targets that cannot be used."""
    out = {}
    for spec in specs:
        try:
            reason = check_target(spec, timeout)
        except Exception as exc:  # noqa: BLE001 - a bad config file, an unparsable spec option
            reason = _one_line(exc)
        if reason:
            out[spec] = reason
    return out
