"""Build Tansu (the Rust broker, crate ``tansu``) into the kipcheck cache, pinned.

``cargo install tansu --version 0.6.0 --features dynostore,libsql --locked`` with
``--root ${KIPCHECK_CACHE:-~/.cache/kipcheck}/tansu/0.6.0/install`` (binary ``bin/tansu``) and
``CARGO_TARGET_DIR`` next to it, under the cache's file lock (targets.go_build.built_once), so
parallel workers build once. The crate's default features carry no storage engine:
``dynostore`` gives ``memory://``, ``libsql`` gives ``sqlite://``. ``--locked`` builds the
dependency versions the crate was published with. About 25 minutes on 2 cores: cargo's
``Compiling`` lines are counted and a progress line goes to stderr every PROGRESS_EVERY_S;
cargo's whole output goes to ``tansu/0.6.0/build.log``. After a successful install the
intermediate target directory (several GB) is removed, so the cache keeps the binary only.
Prefetch (CI): ``python -m targets.tansu.build``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from targets.cached_build import prefetch_main
from targets.go_build import built_once, cache_root

TANSU_VERSION = "0.6.0"
FEATURES = "dynostore,libsql"  # memory:// and sqlite:// storage engines
# `Compiling` lines of a clean build of this version with these features (build.log of
# 2026-12-05): the N/M progress denominator.
EXPECTED_CRATES = 410
BUILD_TIMEOUT_S = 3 * 3600.0
PROGRESS_EVERY_S = 30.0
ABOUT = "about 25 minutes on 2 cores"
FALLBACK_CARGO = Path.home() / ".cargo" / "bin" / "cargo"  # rustup's default, often not on PATH
_COMPILING = re.compile(r"^\s*Compiling (\S+) v")


class TansuBuildError(RuntimeError):
    """cargo is missing or the build failed; the first line says which, then cargo's tail."""


def cache_dir() -> Path:
    return cache_root() / "tansu" / TANSU_VERSION


def binary_path() -> Path:
    return cache_dir() / "install" / "bin" / "tansu"


def log_path() -> Path:
    return cache_dir() / "build.log"


def cargo() -> str:
    """The `cargo` binary, or TansuBuildError saying the target needs it."""
    found = shutil.which("cargo") or (str(FALLBACK_CARGO) if FALLBACK_CARGO.exists() else None)
    if found is None:
        raise TansuBuildError("tansu target not supported here: building Tansu needs cargo (Rust toolchain, "
                              "https://rustup.rs), which is not installed")
    return found


def cargo_command(cargo_bin: str) -> list[str]:
    return [cargo_bin, "install", "tansu", "--version", TANSU_VERSION, "--features", FEATURES, "--locked",
            "--root", str(cache_dir() / "install")]


def progress_line(compiled: int) -> str:
    return (f"kipcheck: building Tansu {TANSU_VERSION} with cargo ({ABOUT}) — progress: "
            f"{compiled}/{EXPECTED_CRATES} crates")


class CompileCounter:
    """Counts cargo's `Compiling <crate> v...` lines (one per crate built)."""

    def __init__(self) -> None:
        self.compiled = 0

    def feed(self, line: str) -> None:
        if _COMPILING.match(line):
            self.compiled += 1


def count_compiled(lines: Iterable[str]) -> int:
    counter = CompileCounter()
    for line in lines:
        counter.feed(line)
    return counter.compiled


def ensure_binary(say: Callable[[str], None] | None = None) -> Path:
    """Path of the Tansu binary, building it on first use (under the cache's file lock)."""
    return built_once(binary_path(), cache_dir(), lambda: _build(say or _stderr))


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _build(say: Callable[[str], None]) -> None:
    argv = cargo_command(cargo())
    target_dir = cache_dir() / "build"
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir))
    counter = CompileCounter()
    say(progress_line(0) + f"; log: {log_path()}")
    with open(log_path(), "w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        reader = threading.Thread(target=_copy, args=(proc.stdout, log, counter), daemon=True)
        reader.start()
        rc = _wait(proc, counter, say)
        reader.join(timeout=10)
    if rc != 0 or not binary_path().exists():
        tail = log_path().read_text(errors="replace")[-3000:]
        what = f"timed out after {BUILD_TIMEOUT_S:.0f}s" if rc is None else f"failed (exit {rc})"
        raise TansuBuildError(f"building Tansu {TANSU_VERSION}: {' '.join(argv)} {what}; log: {log_path()}\n{tail}")
    shutil.rmtree(target_dir, ignore_errors=True)  # intermediate artefacts only; the binary is installed
    say(f"kipcheck: built Tansu {TANSU_VERSION}: {binary_path()} ({counter.compiled} crates)")


def _copy(stream: Iterable[str], log: TextIO, counter: CompileCounter) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        counter.feed(line)


def _wait(proc: subprocess.Popen[str], counter: CompileCounter, say: Callable[[str], None]) -> int | None:
    """cargo's exit code (None: killed at BUILD_TIMEOUT_S), saying the progress meanwhile."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            return proc.wait(timeout=PROGRESS_EVERY_S)
        except subprocess.TimeoutExpired:
            say(progress_line(counter.compiled))
    proc.kill()
    proc.wait()
    return None


if __name__ == "__main__":
    sys.exit(prefetch_main(ensure_binary, TansuBuildError))
