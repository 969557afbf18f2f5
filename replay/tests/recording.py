"""A `kipcheck record` process for tests: started on a cluster, sent three ApiVersions
through its proxy, stopped with SIGTERM as a user's Ctrl-C would (the recording's end:
finished segments, spool decoding, compaction)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from reference_impl.client.raw_client import RawClient

REPO = Path(__file__).resolve().parents[2]


def record_three_api_versions(bootstrap: str, out: str, *extra: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
    """(exit code, stdout after the listening line, stderr) of one recording."""
    proc = subprocess.Popen([sys.executable, "-m", "replay.record_cmd", "--upstream", bootstrap, "--out", out, *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        host, port = proc.stdout.readline().split()[3].rsplit(":", 1)
        with RawClient(host, int(port)) as raw:
            for _ in range(3):
                raw.api_versions()
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return proc.returncode, rest, err
