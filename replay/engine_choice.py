"""Which engine runs `kipcheck check` / `kipcheck diff`, and what the user sees while Spark works.

`--engine auto` (the default) picks by trace size (issue 24, item 4): a small trace is
checked by the pure-Python engine in about a second, where starting Spark alone costs
15-50 s on this 2-core machine; past a size the pure engine's memory (it holds the whole
trace) makes Spark the safe choice. The limits are measured (docs/trace-checks.md,
"Choosing the engine"):

* check: pure 1M exchanges in 43 s against Spark local[2] 54 s; pure at 10M ran out of
  memory (MemoryError at 17.7 GiB), so pure up to 1,000,000 exchanges.
* diff: pure 100k exchanges in 12.8 s and 0.98 GB peak, against Spark local[2] 62.5 s; the
  pure diff holds both traces, so pure up to 200,000 exchanges (about 2 GB).

Under spark-submit, or with `--master`, the user asked for Spark: auto keeps it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

AUTO, PURE, SPARK = "auto", "pure", "spark"
ENGINES = (AUTO, SPARK, PURE)
CHECK_PURE_LIMIT = 1_000_000
DIFF_PURE_LIMIT = 200_000
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class EngineChoice:
    engine: str  # PURE or SPARK
    why: str


def choose(requested: str, exchanges: int, pure_limit: int, master: str | None) -> EngineChoice:
    """The engine for a trace of `exchanges` exchanges; `requested` is what --engine said."""
    if requested in (PURE, SPARK):
        return EngineChoice(requested, f"--engine {requested}")
    if master or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return EngineChoice(SPARK, "a Spark master was given")
    if exchanges <= pure_limit:
        return EngineChoice(PURE, f"{exchanges} exchange(s), at most {pure_limit:,} for the pure engine")
    return EngineChoice(SPARK, f"{exchanges} exchange(s), over the pure engine's {pure_limit:,}")


class SparkProgress:
    """While a Spark job runs: a line on stderr when it starts and every PROGRESS_EVERY_S
    seconds, so a long silent wait is never mistaken for a hang."""

    def __init__(self, command: str, what: str, out: TextIO | None = None, every_s: float = PROGRESS_EVERY_S) -> None:
        self.command, self.what, self.every_s = command, what, every_s
        self.out = out if out is not None else sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="spark-progress", daemon=True)
        self._started = 0.0

    def _say(self, text: str) -> None:
        print(f"kipcheck {self.command}: {text}", file=self.out, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            self._say(f"Spark still working on {self.what} ({time.monotonic() - self._started:.0f} s)")

    def __enter__(self) -> "SparkProgress":
        self._started = time.monotonic()
        self._say(f"starting Spark for {self.what} (its start-up alone takes 15-50 s here)")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
