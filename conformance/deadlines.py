"""Per-test deadlines: a broken broker fails a test, it never hangs the run.

Every test (conformance suites and the project's own unit tests alike) runs under a
deadline: ``@pytest.mark.deadline(seconds)`` or DEFAULT_DEADLINE_S, times
``--kipcheck-deadline-scale``, or ``--kipcheck-deadline`` for every test (certify's
``--test-timeout``). The deadline is a SIGALRM timer in the main thread whose handler
raises DeadlineExceeded, so the worker survives and the next test runs (unlike a
thread-dump-and-exit timeout). librdkafka's ``flush()``/``poll()`` wait in short slices
and check for pending signals, so they are interrupted too; a C call that never checks
(``Consumer.consume()``) is interrupted when it returns.

DeadlineExceeded derives from BaseException so a test's ``except Exception`` does not
swallow it; the timer re-fires every REFIRE_S until the test ends, in case it does.
A C call that never returns (librdkafka's ``Consumer.close()`` against a wedged broker)
never lets the handler run: a watchdog thread then dumps every thread's stack and ends
the process HARD_GRACE_S after the deadline, so pytest-xdist reports that test as failed
("node down") and starts a fresh worker; without xdist the run ends instead of hanging.
The watchdog is Python and needs the GIL, so a C call that holds it would stall the
watchdog as well: faulthandler's timer thread, which needs no GIL, is the backstop
BACKSTOP_AFTER_S later (it replaces pytest's faulthandler_timeout, which only dumps).
Time spent starting a target (the first test on a worker pays it) is not counted:
``paused()`` suspends the timer around the pool's start. The plugin runs each test phase
under ``phase_deadline``: setup and call share one budget, teardown gets a grace period.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

import pytest

# Measured on a reference run (`kipcheck certify --out /tmp/cert0`, 181 rows): slowest test
# 16.5 s, median < 1 s. On real Kafka some tests wait up to 120 s for a share coordinator
# under load (conformance/suites/kip932), so the default leaves room above that; tests
# that need more say so with @pytest.mark.deadline(seconds).
DEFAULT_DEADLINE_S = 300.0
REFIRE_S = 2.0
HARD_GRACE_S = float(os.environ.get("KIPCHECK_DEADLINE_HARD_GRACE_S", "180"))
HARD_EXIT_CODE = 70
BACKSTOP_AFTER_S = 30.0  # after the watchdog's time: it only acts when the watchdog could not
TIMEOUT_REASON = "did not finish within {seconds:g} s"
# On each test item: its deadline, the time setup and call spent, the phase it fired in.
DEADLINE_KEY = pytest.StashKey[dict]()


_report_fd: int | None = None


def report_to_stderr_as_it_is_now() -> None:
    """Keep a copy of the process's stderr (called at pytest_configure, as pytest's own
    faulthandler does) so the watchdog's last words escape pytest's output capture."""
    global _report_fd
    if _report_fd is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            _report_fd = os.dup(sys.stderr.fileno())


def _report_to() -> int:
    """Where the last words go: the saved stderr, else fd 2."""
    return _report_fd if _report_fd is not None else 2


class DeadlineExceeded(BaseException):
    """Raised in the test's main thread when its deadline passes."""


def available() -> bool:
    return hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()


def deadline_for(marker_seconds: float | None, scale: float = 1.0, override: float | None = None) -> float:
    """The deadline of one test: the override wins; else marker or default, scaled."""
    if override is not None:
        return float(override)
    base = DEFAULT_DEADLINE_S if marker_seconds is None else float(marker_seconds)
    return base * scale


class Deadline:
    """One test's timer. `fired` tells whether the deadline passed."""

    def __init__(self, seconds: float, budget: float | None = None) -> None:
        self.seconds = seconds
        self.budget = seconds if budget is None else budget  # what the failure message names
        self.fired = False
        self._remaining: float | None = None
        self._paused_at: float | None = None
        self.paused_s = 0.0
        self._previous: Any = None
        self._armed_at = 0.0
        self._due: float | None = None  # monotonic time the alarm is due; None while paused
        self._ended = threading.Event()

    def _on_alarm(self, _signum: int, _frame: Any) -> None:
        self.fired = True
        raise DeadlineExceeded(TIMEOUT_REASON.format(seconds=self.budget))

    def start(self) -> None:
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self._arm(self.seconds)
        threading.Thread(target=self._watch, name="deadline-watchdog", daemon=True).start()

    def _arm(self, seconds: float) -> None:
        self._armed_at = time.monotonic()
        self._due = self._armed_at + max(seconds, 0.001)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), REFIRE_S)
        faulthandler.dump_traceback_later(max(seconds, 0.001) + HARD_GRACE_S + BACKSTOP_AFTER_S,
                                          file=_report_to(), exit=True)

    def _watch(self) -> None:
        """The last resort when the main thread is stuck in C and the alarm cannot run."""
        while not self._ended.wait(min(5.0, HARD_GRACE_S / 2)):
            due = self._due
            if due is not None and time.monotonic() > due + HARD_GRACE_S:
                fd = _report_to()
                os.write(fd, (f"kipcheck: a test is {HARD_GRACE_S:g} s past its {self.budget:g} s deadline "
                              "inside a call that never returns; ending this test process\n").encode())
                faulthandler.dump_traceback(file=fd, all_threads=True)
                os._exit(HARD_EXIT_CODE)

    def pause(self) -> None:
        # The timer goes first: a re-fire between the two lines must not leave _due unset
        # (the watchdog would then never end a test stuck after the pause).
        remaining, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        self._due = None
        self._remaining = remaining if remaining > 0 else 0.001
        self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._remaining is not None:
            self._arm(self._remaining)
            self._remaining = None
        if self._paused_at is not None:
            self.paused_s += time.monotonic() - self._paused_at
            self._paused_at = None

    def resume_after(self, elapsed: float) -> None:
        """Re-arm after a nested deadline ran for `elapsed` s; that time counts here too."""
        if self._remaining is not None:
            self._arm(max(self._remaining - elapsed, 0.001))
            self._remaining = None
        self._paused_at = None

    def stop(self) -> None:
        self._ended.set()
        self._due = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        if self._previous is not None:
            signal.signal(signal.SIGALRM, self._previous)
            self._previous = None


_current: Deadline | None = None


@contextlib.contextmanager
def running(seconds: float | None, budget: float | None = None) -> Iterator[Deadline | None]:
    """Run the body under a deadline (no-op when None or SIGALRM is unavailable); `budget`
    is the whole test's deadline when this is what is left of it for one phase."""
    global _current
    if seconds is None or not available():
        yield None
        return
    outer = _current
    if outer is not None:  # a pytester run inside a test: the outer clock keeps running
        outer.pause()
    started = time.monotonic()
    d = Deadline(seconds, budget)
    _current = d
    d.start()
    try:
        yield d
    finally:
        d.stop()
        _current = outer
        if outer is not None:
            outer.resume_after(time.monotonic() - started)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Suspend the running test's deadline (e.g. while a target starts)."""
    d = _current
    if d is None or not available():
        yield
        return
    d.pause()
    try:
        yield
    finally:
        d.resume()


TEARDOWN_GRACE_S = 30.0


def _deadline_seconds(item: pytest.Item) -> float:
    """Every test has one: a hang anywhere (a unit test's socket, Docker, a JVM) fails that
    test instead of stalling the run."""
    mark = item.get_closest_marker("deadline")
    marker_s = float(mark.args[0]) if mark is not None and mark.args else None
    return deadline_for(marker_s, item.config.getoption("kipcheck_deadline_scale") or 1.0,
                        item.config.getoption("kipcheck_deadline"))


@contextlib.contextmanager
def phase_deadline(item: pytest.Item, phase: str):
    """One budget for setup + call; teardown gets at least TEARDOWN_GRACE_S to clean up."""
    if phase == "setup":
        item.stash[DEADLINE_KEY] = {"seconds": _deadline_seconds(item), "spent": 0.0, "fired": None}
    info = item.stash.get(DEADLINE_KEY, None)
    if info is None:
        yield
        return
    remaining = info["seconds"] - info["spent"]
    if phase == "teardown":
        remaining = max(remaining, TEARDOWN_GRACE_S)
    t0 = time.monotonic()
    with running(max(remaining, 0.001), info["seconds"]) as d:
        try:
            yield
        finally:
            if d is not None:
                info["spent"] += time.monotonic() - t0 - d.paused_s
                if d.fired and info["fired"] is None:
                    info["fired"] = phase
