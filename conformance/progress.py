"""Certify's console progress, read from the result rows as the workers write them
(so pytest's own output can go to OUT/pytest.log untouched).

On a TTY: one line rewritten in place (suite, done/total, failures, elapsed, ETA).
Otherwise (CI logs): a plain line every `interval` seconds. Quiet: nothing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO

EXPECTED_FILE = "expected.json"
FAILING = ("fail", "error")


def write_expected(results_dir: Path, count: int) -> None:
    """Called by the plugin once collection is done: the denominator of the progress."""
    try:
        (results_dir / EXPECTED_FILE).write_text(json.dumps({"expected_tests": count}), encoding="utf-8")
    except OSError:
        pass


def _fmt(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    def __init__(self, results_dir: Path, out: TextIO | None = None, tty: bool | None = None, quiet: bool = False,
                 interval: float = 30.0) -> None:
        self.results_dir = results_dir
        self.out = sys.stdout if out is None else out
        self.tty = self.out.isatty() if tty is None else tty
        self.quiet = quiet
        self.interval = interval
        self.t0 = time.monotonic()
        self.done = 0
        self.failures = 0
        self.timed_out = 0
        self.suite = ""
        self.expected: int | None = None
        self._offsets: dict[Path, int] = {}
        self._last_print = 0.0
        self._line_len = 0
        self._printed_done = -1

    def _read(self) -> None:
        if self.expected is None:
            try:
                self.expected = int(json.loads((self.results_dir / EXPECTED_FILE).read_text())["expected_tests"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        for f in sorted(self.results_dir.glob("results-*.jsonl")):
            try:
                with open(f, "rb") as fh:
                    fh.seek(self._offsets.get(f, 0))
                    data = fh.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[f] = self._offsets.get(f, 0) + len(complete)
            for line in complete.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                self.done += 1
                self.failures += row.get("verdict") in FAILING
                self.timed_out += bool(row.get("timed_out"))
                self.suite = row.get("suite") or self.suite

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        total = "?" if self.expected is None else str(self.expected)
        eta = ""
        if self.expected and self.done:
            eta = f", ETA {_fmt(elapsed / self.done * max(self.expected - self.done, 0))}"
        fails = f"{self.failures} failed" + (f" ({self.timed_out} timed out)" if self.timed_out else "")
        return f"[{self.done}/{total}] {self.suite or 'starting'}: {fails}, elapsed {_fmt(elapsed)}{eta}"

    def tick(self, force: bool = False) -> None:
        self._read()
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            text = self.line()
            pad = max(self._line_len - len(text), 0)
            self.out.write("\r" + text + " " * pad)
            self._line_len = len(text)
            self.out.flush()
        elif force or now - self._last_print >= self.interval:
            self.out.write(self.line() + "\n")
            self.out.flush()
            self._last_print = now
            self._printed_done = self.done

    def finish(self) -> None:
        self._read()
        if self.quiet:
            return
        if self.tty:
            self.tick()
            self.out.write("\n")
        elif self.done != self._printed_done:
            self.out.write(self.line() + "\n")
        self.out.flush()
