"""Injected clocks. Models read time only through a Clock, so tests can move it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class ManualClock:
    """A clock that moves only when told to (unit tests, model-based tests)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("time does not go backwards")
        self._now += ms
        return self._now


class SystemClock:
    """Wall-clock milliseconds; used only by the server layer."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
