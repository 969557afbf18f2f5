"""Build the kfake target program (``main.go`` here) into the kipcheck cache, pinned.

``go build`` of this directory's module (its ``go.mod``/``go.sum`` pin franz-go and kfake)
into ``${KIPCHECK_CACHE:-~/.cache/kipcheck}/kfake/<kfake version>/kfake-target-<source hash>``
under a file lock, so parallel pytest workers build it once and an edited ``main.go``
builds afresh. Modules come through the Go module proxy (``GOFLAGS=-mod=readonly``: the
pins are never rewritten). Prefetch (CI, before xdist): ``python -m targets.kfake.build``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from targets.cached_build import prefetch_main, sources_digest
from targets.go_build import GoBuildError, build_in_module, built_once, cache_root, go_toolchain as _go_toolchain

FRANZ_GO_VERSION = "1.22.3"
KFAKE_VERSION = "v0.0.0-20260918054303-01f206a7e32c"  # pkg/kfake's pseudo-version, pinned in go.mod
SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("main.go", "go.mod", "go.sum")
BUILD_TIMEOUT_S = 1200.0


def cache_dir() -> Path:
    return cache_root() / "kfake"


def binary_path() -> Path:
    return cache_dir() / KFAKE_VERSION / f"kfake-target-{sources_digest(SOURCE_DIR, SOURCES)}"


def go_toolchain() -> str:
    return _go_toolchain("kfake (needed to build the kfake target)")


def ensure_binary() -> Path:
    """Path of the built kfake target program, building it on first use (under a file lock)."""
    target = binary_path()
    return built_once(target, cache_dir(), lambda: _build(target))


def _build(target: Path) -> None:
    build_in_module(go_toolchain(), ["build"], ".", target, SOURCE_DIR, "kfake", BUILD_TIMEOUT_S)


if __name__ == "__main__":
    sys.exit(prefetch_main(ensure_binary, GoBuildError))
