"""Install the Toxiproxy server, pinned, into the kipcheck cache.

``go install`` from the Go module proxy at a pinned tag (the proxy's version list shows
only old tags, so ``@latest`` would be v2.5.0), with a private GOPATH/GOCACHE under
``${KIPCHECK_CACHE:-~/.cache/kipcheck}/toxiproxy/`` and a file lock, so parallel pytest
workers build it once. ``-ldflags -X ...Version=`` makes ``GET /version`` answer the
release instead of ``"git"``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from targets.cached_build import prefetch_main
from targets.go_build import GoBuildError, built_once, cache_root, go_toolchain, run_go

VERSION = "2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2"
BUILD_TIMEOUT_S = 900.0


def cache_dir() -> Path:
    return cache_root() / "toxiproxy"


def server_path() -> Path:
    return cache_dir() / f"v{VERSION}" / "toxiproxy-server"


def ensure_server() -> Path:
    """Path of the pinned toxiproxy-server, building it on first use (under a file lock)."""
    target = server_path()
    return built_once(target, cache_dir(), lambda: _build(cache_dir(), target))


def _build(root: Path, target: Path) -> None:
    gobin = root / "gobin"
    env = dict(
        os.environ,
        GOPATH=str(root / "gopath"),
        GOCACHE=str(root / "gocache"),
        GOBIN=str(gobin),
        GOFLAGS="-modcacherw",
        CGO_ENABLED="0",
    )
    go = go_toolchain("toxiproxy (needed to build the pinned server)")
    run_go([go, "install", "-ldflags", f"-X {MODULE}.Version={VERSION}", f"{MODULE}/cmd/server@v{VERSION}"],
           "toxiproxy", BUILD_TIMEOUT_S, env=env)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copy2(gobin / "server", tmp)
    tmp.replace(target)


if __name__ == "__main__":
    sys.exit(prefetch_main(ensure_server, GoBuildError))
