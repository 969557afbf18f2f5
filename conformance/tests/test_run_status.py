"""run.json bookkeeping (conformance/run_status.py), the console result line, the
progress line and the preflight checks: fast, no broker."""

from __future__ import annotations

import io
import json
import socket

from conformance import preflight, progress, run_status


def _rows(directory, *verdicts, timed_out=()):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "results-gw0.jsonl", "w") as fh:
        for i, v in enumerate(verdicts):
            row = {"nodeid": f"s.py::t{i}[reference]", "target": "reference", "verdict": v, "suite": "kip98/x"}
            if i in timed_out:
                row.update(timed_out=True, deadline_s=5.0)
            fh.write(json.dumps(row) + "\n")


def test_finalize_counts_rows_and_timeouts(tmp_path):
    _rows(tmp_path, "pass", "fail", timed_out=(1,))
    run = run_status.finalize(tmp_path, run_status.new_run(["kipcheck", "certify"]), expected_tests=2)
    assert (run["status"], run["finished_tests"]) == ("complete", 2)
    assert run["timed_out"] == [{"nodeid": "s.py::t1[reference]", "target": "reference", "deadline_s": 5.0}]
    assert run_status.outcome(run, "fail") == ("fail", "result: FAIL")
    run_status.write(tmp_path, run)
    assert run_status.load(tmp_path)["schema"] == 1


def test_interrupted_run_is_incomplete_never_pass(tmp_path):
    _rows(tmp_path, "pass", "pass", "pass")
    run = run_status.finalize(tmp_path, run_status.new_run(), expected_tests=88,
                              interrupted={"signal": "SIGINT", "at": run_status.now_iso()},
                              reasons=["interrupted by SIGINT after 3 of 88 tests"])
    assert run["status"] == "interrupted"
    word, line = run_status.outcome(run, "pass")
    assert word == "incomplete"
    assert line.startswith("result: INCOMPLETE (3 of 88 tests finished)") and "SIGINT" in line


def test_missing_rows_alone_make_a_run_incomplete(tmp_path):
    _rows(tmp_path, "pass")
    run = run_status.finalize(tmp_path, run_status.new_run(), expected_tests=2)
    assert run["status"] == "complete" and run_status.outcome(run, "pass")[0] == "incomplete"


def test_unreachable_and_partial_scope_lines(tmp_path):
    run = run_status.finalize(tmp_path, run_status.new_run(), unreachable_targets={"external:h:1": "refused"})
    assert run["status"] == "target_unreachable"
    assert run_status.outcome(run, "no-results") == ("not-run", "result: NOT RUN: target unreachable — external:h:1: refused")
    _rows(tmp_path / "b", "pass")
    run = run_status.finalize(tmp_path / "b", run_status.new_run(), expected_tests=1,
                              scope={"narrowed": True, "suite_exprs": ["kip98"]})
    word, line = run_status.outcome(run, "pass")
    assert word == "partial-scope" and line.startswith("result: PARTIAL SCOPE") and "suite kip98" in line
    assert run_status.outcome(run, "fail")[0] == "fail"  # a failure in scope is a failure


def test_progress_plain_lines_and_tty_line(tmp_path):
    _rows(tmp_path, "pass", "fail", timed_out=(1,))
    progress.write_expected(tmp_path, 4)
    buf = io.StringIO()
    p = progress.Progress(tmp_path, out=buf, tty=False, interval=0)
    p.tick()
    assert buf.getvalue().startswith("[2/4] kip98/x: 1 failed (1 timed out), elapsed 0:00")
    assert "ETA" in buf.getvalue()
    tty = io.StringIO()
    p = progress.Progress(tmp_path, out=tty, tty=True)
    p.tick()
    p.finish()
    assert tty.getvalue().startswith("\r[2/4]") and tty.getvalue().endswith("\n")
    quiet = io.StringIO()
    p = progress.Progress(tmp_path, out=quiet, quiet=True)
    p.tick()
    p.finish()
    assert quiet.getvalue() == "" and p.done == 2


def test_preflight_external_refused_is_one_line_and_fast():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    problems = preflight.check_all([f"external:127.0.0.1:{port}", "reference"], timeout=2)
    assert list(problems) == [f"external:127.0.0.1:{port}"]
    assert "unreachable" in problems[f"external:127.0.0.1:{port}"] and "\n" not in problems[f"external:127.0.0.1:{port}"]


def test_preflight_external_silent_listener(tmp_path):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        spec = "external:%s:%d" % srv.getsockname()
        problems = preflight.check_all([spec], timeout=1)
    assert "no Kafka ApiVersions answer" in problems[spec]


def test_preflight_java_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert "no Java runtime" in preflight.check_all(["kafka-native:3.9"])["kafka-native:3.9"]
