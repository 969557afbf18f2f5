"""Per-test deadlines (conformance/deadlines.py): a test blocked in a sleep, in a socket
recv on a silent server, or in librdkafka's flush()/poll() against a broker that never
answers is failed by its deadline, and the next test on the same worker still runs.

Runs a tiny suite in a pytest subprocess (an xdist worker, like certify) against a fake
target; the "broker" is a real listening socket that never answers.
"""

from __future__ import annotations

import json
import time
import textwrap

import pytest

from conformance import deadlines

pytest_plugins = ("pytester",)

CONFTEST = '''
import socket
import pytest
from targets.target import Capabilities, Target


class FakeTarget(Target):
    @property
    def bootstrap_servers(self):
        return "127.0.0.1:1"

    def start(self):
        pass

    def stop(self):
        pass

    def capabilities(self, refresh=False):
        return Capabilities(api_versions={18: (0, 4)})


@pytest.hookimpl
def pytest_kipcheck_create_target(spec, config):
    return FakeTarget(spec)


@pytest.fixture(scope="session")
def silent():
    """A TCP listener that accepts connections (backlog) and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    yield srv.getsockname()
    srv.close()
'''

CATALOG = """\
kip: TEST
title: deadline test catalog
seed: null
status: protocol
requirements:
  - id: TEST.A.001
    section: s
    level: must
    behaviour: b1
    oracle: o1
    implemented_in: {apache-kafka: ">=2.0", reference: true}
"""

SUITE = '''
import socket
import time

import pytest

QUIET = {"log_level": 0, "socket.timeout.ms": 60000}

pytestmark = [pytest.mark.requirement("TEST.A.001"), pytest.mark.deadline(1.5)]


def test_a_sleep(target):
    time.sleep(120)


def test_b_recv_on_silent_server(target, silent):
    sock = socket.create_connection(silent)
    sock.settimeout(None)
    sock.recv(10)


def test_c_swallowing_except_exception(target):
    try:
        time.sleep(120)
    except Exception:
        pass
    time.sleep(120)


def test_d_librdkafka_flush(target, silent):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": "%s:%d" % silent, **QUIET})
    p.produce("t", b"x")
    p.flush(120)


def test_e_librdkafka_poll(target, silent):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": "%s:%d" % silent, "group.id": "g", **QUIET})
    c.subscribe(["t"])
    c.poll(120)


@pytest.mark.deadline(60)
def test_f_next_test_runs(target):
    """Only has to run: the worker survived the stuck tests before it (the outer test reads
    its verdict from the results)."""
'''


def test_deadline_for_marker_scale_and_override():
    assert deadlines.deadline_for(None) == deadlines.DEFAULT_DEADLINE_S
    assert deadlines.deadline_for(10, scale=3) == 30
    assert deadlines.deadline_for(10, scale=3, override=7) == 7


def test_blocked_tests_fail_by_deadline_and_the_run_goes_on(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "catalog").mkdir()
    (pytester.path / "catalog" / "test.yaml").write_text(CATALOG)
    (pytester.path / "conformance" / "suites").mkdir(parents=True)
    (pytester.path / "conformance" / "suites" / "test_blocked.py").write_text(textwrap.dedent(SUITE))
    out = pytester.path / "results"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--kipcheck-catalog", str(pytester.path / "catalog"),
        "--kipcheck-results", str(out), "-n", "1", "--target", "reference", timeout=240,
    )
    got = {}
    for path in out.glob("results-*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            got[row["test"]] = row
    assert sorted(got) == ["test_a_sleep", "test_b_recv_on_silent_server", "test_c_swallowing_except_exception",
                           "test_d_librdkafka_flush", "test_e_librdkafka_poll", "test_f_next_test_runs"]
    for name, row in got.items():
        if name == "test_f_next_test_runs":
            assert row["verdict"] == "pass" and "timed_out" not in row
            continue
        assert row["verdict"] == "fail", (name, row)
        assert row["timed_out"] is True and row["deadline_s"] == 1.5
        assert row["reason"].startswith("did not finish within 1.5 s")
        assert row["duration_s"] < 60, (name, row["duration_s"])
        assert row["evidence"]["assertion"]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["finished_tests"] == 6
    assert sorted(t["nodeid"].split("::")[1].split("[")[0] for t in run["timed_out"]) == sorted(got)[:5]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_deadline_option_overrides_markers(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "catalog").mkdir()
    (pytester.path / "catalog" / "test.yaml").write_text(CATALOG)
    (pytester.path / "conformance" / "suites").mkdir(parents=True)
    (pytester.path / "conformance" / "suites" / "test_one.py").write_text(textwrap.dedent('''
        import time, pytest
        @pytest.mark.requirement("TEST.A.001")
        @pytest.mark.deadline(600)
        def test_slow(target):
            time.sleep(120)
    '''))
    out = pytester.path / "results"
    pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--kipcheck-catalog", str(pytester.path / "catalog"),
        "--kipcheck-results", str(out), "--kipcheck-deadline", "1", timeout=120,
    )
    (row,) = [json.loads(line) for line in (out / "results-main.jsonl").read_text().splitlines()]
    assert row["timed_out"] and row["deadline_s"] == 1.0 and row["reason"].startswith("did not finish within 1 s")


def test_unit_tests_outside_the_suites_have_a_deadline_too(pytester: pytest.Pytester, monkeypatch):
    """A hang in the project's own tests (a socket, Docker, a JVM) must not stall CI either."""
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    (pytester.path / "test_unit.py").write_text(textwrap.dedent('''
        import time, pytest
        @pytest.mark.deadline(1)
        def test_hangs():
            time.sleep(120)
        def test_next_runs():
            pass
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*did not finish within 1 s*"])


def _run_stuck_test(pytester: pytest.Pytester, monkeypatch, blocked_call: str, timeout: float):
    """Run, in a pytester subprocess with a 2 s watchdog grace, one 1 s-deadline test that
    blocks SIGALRM (so the alarm cannot interrupt it) and then makes `blocked_call`."""
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    monkeypatch.setenv("KIPCHECK_DEADLINE_HARD_GRACE_S", "2")
    (pytester.path / "test_stuck.py").write_text(textwrap.dedent(f'''
        import ctypes, signal, time, pytest
        @pytest.mark.deadline(1)
        def test_stuck_in_c():
            signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
            {blocked_call}
    '''))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=timeout)
    return result, time.monotonic() - started


def test_a_call_that_never_returns_ends_the_worker_instead_of_hanging(pytester: pytest.Pytester, monkeypatch):
    """The alarm cannot interrupt a C call that never returns (simulated by blocking
    SIGALRM): the watchdog dumps the stacks and ends the process, which xdist reports as
    a failed test and replaces."""
    result, elapsed = _run_stuck_test(pytester, monkeypatch, "time.sleep(120)", 120)
    assert result.ret == deadlines.HARD_EXIT_CODE and elapsed < 60
    result.stderr.fnmatch_lines(["*past its 1 s deadline inside a call that never returns*", "*test_stuck_in_c*"])


def test_a_call_that_holds_the_gil_forever_still_ends_the_worker(pytester: pytest.Pytester, monkeypatch):
    """A C call that never returns and holds the GIL (a ctypes.PyDLL call; in CI it was
    librdkafka's Consumer.close()) stalls the Python watchdog too; faulthandler's timer
    thread needs no GIL and ends the process."""
    result, elapsed = _run_stuck_test(pytester, monkeypatch, "ctypes.PyDLL(None).sleep(150)", 170)
    assert result.ret not in (0, deadlines.HARD_EXIT_CODE), result.ret  # not the watchdog: it had no GIL
    assert elapsed < 1 + 2 + deadlines.BACKSTOP_AFTER_S + 60, elapsed
    result.stderr.fnmatch_lines(["Timeout (*", "*test_stuck_in_c*"])


def test_a_nested_deadline_hands_the_outer_clock_back():
    """pytester runs tests inside a test: the inner deadline must not disarm the outer one."""
    with pytest.raises(deadlines.DeadlineExceeded):
        with deadlines.running(1.0) as outer:
            with deadlines.running(30.0):
                time.sleep(0.3)
            time.sleep(5)  # the outer deadline (1 s, 0.3 s already spent) must fire here
    assert outer is not None and outer.fired
