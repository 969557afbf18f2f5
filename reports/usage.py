"""Bad input, said the same way by every command (issue 24, item 2).

Every `kipcheck` command refuses bad input with one line on stderr and exit 2, never a
traceback: ``kipcheck <command>: error: <what> (<hint>)``. Commands on any floor raise
`UsageError` (or use the argparse types below); the app's dispatcher (cli/main.py) prints it
with `usage_line`. It lives on this low floor so that replay, chaos and conformance commands
can raise it without importing the app.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

EXIT_USAGE = 2


class UsageError(ValueError):
    """Bad input or an infrastructure problem found before any work: one line, exit 2.

    `hint`, when given, says what would be accepted; it is printed in parentheses.
    """

    def __init__(self, what: str, hint: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint


def usage_line(command: str | None, what: str, hint: str | None = None) -> str:
    """``kipcheck <command>: error: <what> (<hint>)`` on one line (newlines folded)."""
    where = f"kipcheck {command}" if command else "kipcheck"
    text = " ".join(str(what).split())
    if hint:
        text += f" ({' '.join(str(hint).split())})"
    return f"{where}: error: {text}"


def _number(kind: type, low: float | None, high: float | None, low_open: bool) -> Callable[[str], float]:
    """An argparse `type=` that parses `kind` and refuses values outside the range."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if low is not None and (value <= low if low_open else value < low):
            raise argparse.ArgumentTypeError(f"{text} must be {'>' if low_open else '>='} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} must be <= {high:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def positive_int(high: int | None = None) -> Callable[[str], int]:
    """Integers >= 1 (counts, sizes, worker numbers)."""
    return _number(int, 1, high, low_open=False)  # type: ignore[return-value]


def non_negative_int(high: int | None = None) -> Callable[[str], int]:
    return _number(int, 0, high, low_open=False)  # type: ignore[return-value]


def positive_float(high: float | None = None) -> Callable[[str], float]:
    """Durations and timeouts: strictly positive, finite."""
    return _number(float, 0, high, low_open=True)


def non_negative_float(high: float | None = None) -> Callable[[str], float]:
    return _number(float, 0, high, low_open=False)


def non_empty_path(text: str) -> str:
    """A path option: the empty string would silently mean the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path is not a directory name")
    return text
