"""Build franz-go's `pkg/kgo` test binary into the kipcheck cache, pinned.

`go test -c github.com/twmb/franz-go/pkg/kgo` inside this directory's module (its go.mod and
go.sum pin franz-go v1.22.3, the same pin as targets/kfake/go.mod; `suite.go` imports kgo so
the requirement stays tidy) into
``${KIPCHECK_CACHE:-~/.cache/kipcheck}/client-suites/franz-go/<version>/kgo.test-<pins hash>``
under a file lock (targets/go_build.py), so parallel pytest workers build it once. Modules come
through the Go module proxy; ``GOFLAGS=-mod=readonly``: the pins are never rewritten.
Prefetch (CI, before xdist): ``python -m client_suites.franz_go.build``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from client_suites.runner import SuiteBuildError
from targets.cached_build import prefetch_main, sources_digest
from targets.go_build import GoBuildError, build_in_module, built_once, cache_root, go_toolchain

FRANZ_GO_VERSION = "1.22.3"  # = targets/kfake/go.mod's franz-go
PACKAGE = "github.com/twmb/franz-go/pkg/kgo"
SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("go.mod", "go.sum", "suite.go")
# Measured 2026-12-05 on 2 busy cores, module cache warm: 43 s (see docs/clients.md).
BUILD_TIMEOUT_S = 1200.0


def cache_dir() -> Path:
    return cache_root() / "client-suites" / "franz-go"


def binary_path() -> Path:
    return cache_dir() / f"v{FRANZ_GO_VERSION}" / f"kgo.test-{sources_digest(SOURCE_DIR, SOURCES)}"


def go() -> str:
    """The Go toolchain (SuiteBuildError when missing)."""
    try:
        return go_toolchain("franz-go's suite (needed to build its kgo test binary)")
    except GoBuildError as exc:
        raise SuiteBuildError(str(exc)) from None


def ensure_binary() -> Path:
    """The built test binary, building it on first use (SuiteBuildError when that fails)."""
    target = binary_path()
    try:
        return built_once(target, cache_dir(), lambda: _build(target))
    except GoBuildError as exc:
        raise SuiteBuildError(str(exc)) from None


def _build(target: Path) -> None:
    build_in_module(go(), ["test", "-c"], PACKAGE, target, SOURCE_DIR, "franz-go suite", BUILD_TIMEOUT_S)


if __name__ == "__main__":
    sys.exit(prefetch_main(ensure_binary, SuiteBuildError))
