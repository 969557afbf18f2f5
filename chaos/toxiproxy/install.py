"""Install the Toxiproxy server, pinned, into the kipcheck cache.

``go install`` from the Go module proxy at a pinned tag (the proxy's version list shows
only old tags, so ``@latest`` would be v2.5.0), with a private GOPATH/GOCACHE under
``${KIPCHECK_CACHE:-~/.cache/kipcheck}/toxiproxy/`` and a file lock, so parallel pytest
workers build it once. ``-ldflags -X ...Version=`` makes ``GET /version`` answer the
release instead of ``"git"``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2"
BUILD_TIMEOUT_S = 900.0


class ToxiproxyInstallError(RuntimeError):
    """Go is missing or the build failed; the message carries go's output."""


def cache_dir() -> Path:
    base = os.environ.get("KIPCHECK_CACHE") or str(Path.home() / ".cache" / "kipcheck")
    return Path(base) / "toxiproxy"


def server_path() -> Path:
    return cache_dir() / f"v{VERSION}" / "toxiproxy-server"


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise ToxiproxyInstallError("toxiproxy: the Go toolchain is not installed (needed to build the pinned server)")
    return go


def ensure_server() -> Path:
    """Path of the pinned toxiproxy-server, building it on first use (under a file lock)."""
    target = server_path()
    if target.exists():
        return target
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # another worker built it while we waited
            return target
        _build(root, target)
    return target


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
    argv = [_go(), "install", "-ldflags", f"-X {MODULE}.Version={VERSION}", f"{MODULE}/cmd/server@v{VERSION}"]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ToxiproxyInstallError(f"toxiproxy: go install timed out after {BUILD_TIMEOUT_S:.0f}s") from exc
    if proc.returncode != 0:
        raise ToxiproxyInstallError(f"toxiproxy: {' '.join(argv)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copy2(gobin / "server", tmp)
    tmp.replace(target)


def main() -> int:
    try:
        print(ensure_server())
    except ToxiproxyInstallError as exc:
        print(f"kipcheck: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
