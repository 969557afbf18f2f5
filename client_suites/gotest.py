"""Go test binaries as client suites: run one top-level test of a `go test -c` binary with
the test2json framing, convert its stream with `go tool test2json -t`, and read the events
into one outcome per test. Shared by every Go client suite (franz-go's kgo today; sarama's
functional tests would be the second).

Every test and subtest is an outcome, as Go accounts them (a parent runs its own body, e.g.
kgo's TestTxnEtl/range, then its subtests; a failed subtest fails its parent). A test with a
`run` event and no end was killed: by the deadline (our kill, or Go's `-test.timeout`
panic) it is a fail with reason "deadline"; otherwise the binary died under it (a panic in
any goroutine ends the whole binary), and the reason is the panic line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Iterable

from client_suites.runner import DEADLINE_REASON, TestOutcome

# Go's testing package frames every test's output with these lines (testing/testing.go).
_FRAMING = re.compile(r"^(=== (RUN|PAUSE|CONT|NAME)\s|--- (PASS|FAIL|SKIP): )")
# A t.Log/t.Skip/t.Error line: "    file_test.go:123: message".
_MESSAGE = re.compile(r"^\s+[\w.-]+\.go:\d+: (.*)$")
_TIMED_OUT = "panic: test timed out after"
TAIL_LINES = 40
TAIL_CHARS = 4000
KILL_GRACE_S = 30.0  # Go's own -test.timeout fires at the deadline; our kill is the backstop


class _Test:
    def __init__(self, name: str, started: str | None) -> None:
        self.name = name
        self.started = started
        self.action: str | None = None
        self.elapsed = 0.0
        self.output: list[str] = []


def parse_events(lines: Iterable[str], killed: bool = False, chatter: re.Pattern[str] | None = None
                 ) -> list[TestOutcome]:
    """Outcomes from a `go tool test2json -t` stream; `killed`: the runner ended the binary
    at the deadline; `chatter`: the suite's own log lines that are never a reason (cleanup,
    timing), matched against the message."""
    tests: dict[str, _Test] = {}
    last_time: str | None = None
    timed_out = killed
    panic: str | None = None
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # not an event (test2json wraps all output; a torn last line)
        if not isinstance(ev, dict):
            continue
        last_time = ev.get("Time") or last_time
        name, action = ev.get("Test"), ev.get("Action")
        text = ev.get("Output") or ""
        if text.startswith(_TIMED_OUT):
            timed_out = True
        elif text.startswith("panic: ") and panic is None:
            panic = text.strip()
        if not name:
            continue
        test = tests.setdefault(name, _Test(name, ev.get("Time")))
        if action in ("pass", "fail", "skip"):
            test.action, test.elapsed = action, float(ev.get("Elapsed") or 0.0)
        elif action == "output" and not _FRAMING.match(text) and text.strip():
            test.output.append(text.rstrip("\n"))
    return [_outcome(t, tests, timed_out, panic, last_time, chatter) for t in tests.values()]


def _outcome(test: _Test, tests: dict[str, _Test], timed_out: bool, panic: str | None,
             last_time: str | None, chatter: re.Pattern[str] | None) -> TestOutcome:
    tail = "\n".join(test.output[-TAIL_LINES:])[-TAIL_CHARS:]
    if test.action is None:  # it never ended: killed
        reason = DEADLINE_REASON if timed_out else (panic or "the test binary exited before the test ended")
        return TestOutcome(test.name, "fail", reason, _span(test.started, last_time), tail, timed_out)
    if test.action == "pass":
        return TestOutcome(test.name, "pass", "", test.elapsed, tail)
    messages = [m.group(1) for m in map(_MESSAGE.match, test.output)
                if m and not (chatter and chatter.search(m.group(1)))]
    if test.action == "skip":
        # t.Skip is called before a test does anything; later lines are deferred logs.
        return TestOutcome(test.name, "skip", messages[0] if messages else "skipped", test.elapsed, tail)
    failing = next((ln.strip() for ln in test.output if ln.startswith("panic: ")), None)
    failed_sub = next((n for n, t in tests.items() if n.startswith(test.name + "/") and t.action != "pass"
                       and t.action != "skip"), None)
    reason = failing or (messages[-1] if messages else f"subtest {failed_sub} failed" if failed_sub else "failed")
    return TestOutcome(test.name, "fail", reason, test.elapsed, tail)


def _span(start: str | None, end: str | None) -> float:
    try:
        return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def run_one(go: str, binary: Path, test: str, env: dict[str, str], deadline_s: float, workdir: Path,
            chatter: re.Pattern[str] | None = None, companion: str | None = None) -> list[TestOutcome]:
    """Run `^test$` of `binary` (its own process: a panic ends only this test), Go's
    `-test.timeout` at the deadline and a kill KILL_GRACE_S later, then parse its stream.
    `companion`: a serial test run first in the same process, for a test that relies on
    state another test sets up (its outcomes are not returned)."""
    workdir.mkdir(parents=True, exist_ok=True)
    raw = workdir / f"{test}.out"
    events = workdir / f"{test}.json"
    names = "|".join(re.escape(n) for n in (companion, test) if n)
    argv = [str(binary), "-test.run", f"^({names})$", "-test.v=test2json", "-test.count=1",
            f"-test.timeout={deadline_s:g}s"]
    killed = False
    with open(raw, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(workdir),
                                start_new_session=True)
        try:
            proc.wait(timeout=deadline_s + KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            killed = True
            with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:  # interrupted (the caller's deadline): leave no test binary behind
                os.killpg(proc.pid, signal.SIGKILL)
    with open(raw, "rb") as src, open(events, "wb") as dst:
        subprocess.run([go, "tool", "test2json", "-t"], stdin=src, stdout=dst, check=False, timeout=120)
    with open(events, encoding="utf-8", errors="replace") as fh:
        outcomes = [o for o in parse_events(fh, killed=killed, chatter=chatter)
                    if o.name == test or o.name.startswith(test + "/")]
    if not outcomes:
        # no event for the test: the binary did not start it (unknown name, crash at start)
        tail = raw.read_bytes().decode("utf-8", "replace")[-TAIL_CHARS:]
        outcomes.append(TestOutcome(test, "fail", "no result: the test binary reported nothing for this test",
                                    0.0, tail, killed))
    return outcomes
