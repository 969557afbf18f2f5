"""`python -m targets.container_reaper OWNER_PID RUN_ID`: Ryuk's job without Ryuk's image.

Started by the testcontainers target in its own session; when the owner process is gone
(normal exit, crash or SIGKILL) it removes the containers and networks labelled with the
run id. A target that stops cleanly terminates it first.
"""

from __future__ import annotations

import subprocess
import sys
import time

from targets.docker_engine import LABEL_RUN, pid_alive

POLL_S = 0.5


def remove_run(run_id: str) -> None:
    """docker rm -f the run's containers, then remove its networks."""
    label = f"label={LABEL_RUN}={run_id}"
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True,
                         timeout=60, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True, timeout=120, check=False)
    nets = subprocess.run(["docker", "network", "ls", "-q", "--filter", label], capture_output=True, text=True,
                          timeout=60, check=False).stdout.split()
    if nets:
        subprocess.run(["docker", "network", "rm", *nets], capture_output=True, timeout=120, check=False)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m targets.container_reaper OWNER_PID RUN_ID", file=sys.stderr)
        return 2
    owner, run_id = int(argv[0]), argv[1]
    while pid_alive(owner):
        time.sleep(POLL_S)
    remove_run(run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
