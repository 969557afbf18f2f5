"""Build the kfake target program (``main.go`` here) into the kipcheck cache, pinned.

``go build`` of this directory's module (its ``go.mod``/``go.sum`` pin franz-go and kfake)
into ``${KIPCHECK_CACHE:-~/.cache/kipcheck}/kfake/<kfake version>/kfake-target-<source hash>``
under a file lock, so parallel pytest workers build it once and an edited ``main.go``
builds afresh. Modules come through the Go module proxy (``GOFLAGS=-mod=readonly``: the
pins are never rewritten). Prefetch (CI, before xdist): ``python -m targets.kfake.build``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from targets.go_build import GoBuildError, built_once, cache_root, go_toolchain as _go_toolchain, run_go

FRANZ_GO_VERSION = "1.22.3"
KFAKE_VERSION = "v0.0.0-20260918054303-01f206a7e32c"  # pkg/kfake's pseudo-version, pinned in go.mod
SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("main.go", "go.mod", "go.sum")
BUILD_TIMEOUT_S = 1200.0


def cache_dir() -> Path:
    return cache_root() / "kfake"


def source_hash() -> str:
    """Digest of the program and its pins: a changed main.go or go.sum is a new binary."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def binary_path() -> Path:
    return cache_dir() / KFAKE_VERSION / f"kfake-target-{source_hash()}"


def go_toolchain() -> str:
    return _go_toolchain("kfake (needed to build the kfake target)")


def ensure_binary() -> Path:
    """Path of the built kfake target program, building it on first use (under a file lock)."""
    target = binary_path()
    return built_once(target, cache_dir(), lambda: _build(target))


def _build(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    env = dict(os.environ, GOFLAGS="-mod=readonly -modcacherw -buildvcs=false", GOWORK="off", CGO_ENABLED="0")
    run_go([go_toolchain(), "build", "-trimpath", "-o", str(tmp), "."], "kfake", BUILD_TIMEOUT_S,
           cwd=SOURCE_DIR, env=env)
    tmp.replace(target)


def main() -> int:
    try:
        print(ensure_binary())
    except GoBuildError as exc:
        print(f"kipcheck: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
