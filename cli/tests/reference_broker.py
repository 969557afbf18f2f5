"""`kipcheck broker` on free ports in a child process, for tests that need a reference served
as `external:` (the guide's commands, a certify run against an external target)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from cli.certify import package_root


@contextlib.contextmanager
def served_reference(cwd: Path | None = None) -> Iterator[str]:
    """Yields the bootstrap `kipcheck broker --port 0` printed; SIGTERM (then kill) at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package_root()), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "broker", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        first = proc.stdout.readline().strip() if proc.stdout else ""
        assert first.startswith("bootstrap="), f"kipcheck broker did not start: {first!r}" + (
            proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield first.removeprefix("bootstrap=")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
