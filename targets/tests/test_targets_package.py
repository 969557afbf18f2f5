"""`targets` is this project's package (a PyPI package of the same name must not shadow it), and its entry points run.

Also covers `python -m targets.target_up SPEC` (what `kipcheck target up` runs) as a subprocess.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import targets
from targets.tests.netcheck import refused
from reference_impl.client.raw_client import RawClient, parse_bootstrap
from targets.target_up import target_up

REPO = Path(__file__).resolve().parents[2]

SUBMODULES = [
    "targets.target",
    "targets.factory",
    "targets.reference_target",
    "targets.librdkafka_mock",
    "targets.external",
    "targets.testcontainers_target",
    "targets.target_up",
    "targets.kafka_native",
]


def _inside_kipcheck(path: Path) -> bool:
    """Inside this checkout, or listed among the files of the installed kipcheck distribution."""
    path = path.resolve()
    if path.is_relative_to(REPO):
        return True
    try:
        dist = importlib.metadata.distribution("kipcheck")
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(Path(dist.locate_file(f)).resolve() == path for f in dist.files or ())


def test_marker_and_location() -> None:
    assert getattr(targets, "IS_KIPCHECK_TARGETS", False) is True
    assert targets.__file__ is not None
    assert _inside_kipcheck(Path(targets.__file__)), targets.__file__
    spec = importlib.util.find_spec("targets")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve() == Path(targets.__file__).resolve()


@pytest.mark.parametrize("name", SUBMODULES)
def test_submodules_import_from_our_package(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert _inside_kipcheck(Path(module.__file__)), module.__file__


def test_import_from_elsewhere_resolves_to_kipcheck(tmp_path: Path) -> None:
    """From an unrelated cwd (no repo on sys.path) `import targets` must still be ours."""
    try:
        importlib.metadata.distribution("kipcheck")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kipcheck is not installed in this interpreter (running from a source tree)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import targets, targets.target, targets.factory\n"
        "print(targets.IS_KIPCHECK_TARGETS)\n"
        "print(targets.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    marker, location = out.stdout.split("\n")[:2]
    assert marker == "True"
    assert _inside_kipcheck(Path(location)), location


def test_pypi_targets_does_not_shadow_ours() -> None:
    """If a PyPI distribution named `targets` is installed too, ours must still win."""
    try:
        other = importlib.metadata.distribution("targets")
    except importlib.metadata.PackageNotFoundError:
        return  # not installed: nothing can shadow us
    imported = Path(targets.__file__).resolve()
    theirs = {Path(other.locate_file(f)).resolve() for f in other.files or ()}
    assert imported not in theirs


# --- python -m targets.target_up ---------------------------------------------------------


def _run_target_up(spec: str, tmp_path: Path) -> tuple[str, str, list[str], int]:
    """Start target_up, read the first line, check the bootstrap answers, SIGTERM it."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "targets.target_up", spec],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        first = proc.stdout.readline().strip()
        if not first.startswith("bootstrap="):
            proc.wait(30)
            pytest.fail(f"first line {first!r}, stderr: {proc.stderr.read()}")
        bootstrap = first.removeprefix("bootstrap=")
        for host, port in parse_bootstrap(bootstrap):
            with RawClient(host, port, timeout=5) as client:
                assert 18 in client.api_versions(0)
        # Read through the descriptive lines before signalling; reading the pipe through
        # the same buffered file (not communicate()) so read-ahead lines are not lost.
        lines = []
        while not any(line.startswith("log_dir=") for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        lines += proc.stdout.read().splitlines()
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return bootstrap, err, lines, proc.returncode


@pytest.mark.parametrize("spec, kind", [("reference:nodes=2", "reference"), ("librdkafka-mock:nodes=2", "librdkafka-mock")])
def test_target_up_prints_bootstrap_first_and_stops_on_sigterm(spec: str, kind: str, tmp_path: Path) -> None:
    bootstrap, err, lines, code = _run_target_up(spec, tmp_path)
    assert code == 0, err
    assert len(parse_bootstrap(bootstrap)) == 2
    assert f"kind={kind}" in lines and "nodes=2" in lines
    assert any(line.startswith("startup_seconds=") for line in lines)
    assert any(line.startswith("log_dir=") for line in lines)
    assert lines[-1] == "stopped=SIGTERM"
    assert all(refused(h, p) for h, p in parse_bootstrap(bootstrap))


def test_target_up_sigint_is_clean_too(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "targets.target_up", "librdkafka-mock"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout.readline().startswith("bootstrap=")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == "stopped=SIGINT"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no-such-kind", "bad target spec"),
        ("external:127.0.0.1:1", "unreachable"),
        ("librdkafka-mock:mode=nope", "mode must be one of"),
    ],
)
def test_target_up_start_errors_exit_2_with_one_line(spec: str, message: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-m", "targets.target_up", spec],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    err_lines = out.stderr.strip().splitlines()
    assert len(err_lines) == 1 and message in err_lines[0] and err_lines[0].startswith("kipcheck target: error:")


def test_target_up_in_process_with_stop_event() -> None:
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(target_up("librdkafka-mock", out=out, err=err, stop_event=stop)))
    worker.start()
    deadline = time.monotonic() + 30
    while "ready" not in out.getvalue() and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.05)
    stop.set()
    worker.join(30)
    assert result == [0], err.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("bootstrap=") and lines[-1] == "stopped=requested"
