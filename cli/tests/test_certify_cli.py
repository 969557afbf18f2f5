"""`kipcheck certify` as a user runs it (a subprocess on the reference target): the result
line, run.json and the exit code agree when the run is interrupted, stopped by its time
limit, narrowed, or its target is unreachable; --out inside another project changes
nothing about what runs.
The report side (reports/) derives summary.result from run.json; the report assertions
check that it agrees with the console.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


from cli.certify import package_root

KIPCHECK = Path(sys.executable).parent / "kipcheck"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_root()), env.get("PYTHONPATH")]))
    env.pop("KIPCHECK_TARGETS", None)
    return env


def _command(*args: str) -> list[str]:
    if KIPCHECK.exists():
        return [str(KIPCHECK), *args]
    return [sys.executable, "-m", "cli.main", *args]


def _run_json(out: Path) -> dict:
    return json.loads((out / "results" / "run.json").read_text())


def _report_result(out: Path, expected: str) -> None:
    """The report must say what the run did (reports/ applies the run.json rules)."""
    got = json.loads((out / "report.json").read_text())["summary"]["result"]
    assert got == expected, f"report.json says {got!r}, not {expected!r}"


def _result_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("result: "))


def test_unreachable_external_target_is_not_run(tmp_path):
    """The preflight finds the dead address before any test starts (no pytest run at all);
    how fast is a benchmark figure (benchmarks/certify_bench.py), not a timed assertion."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    proc = subprocess.run(_command("certify", "--target", f"external:127.0.0.1:{port}", "--out", str(out)),
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _result_line(proc.stdout).startswith("result: NOT RUN: target unreachable — external:127.0.0.1:")
    run = _run_json(out)
    assert run["status"] == "target_unreachable" and run["finished_tests"] == 0
    assert list(run["unreachable_targets"]) == [f"external:127.0.0.1:{port}"]
    assert not (out / "pytest.log").exists()  # no test ran
    _report_result(out, "not-run")


FAKE_PROJECT_FILES = {
    "pytest.ini": "[pytest]\naddopts = -p this_plugin_does_not_exist\n",
    "conftest.py": "raise RuntimeError('the fake project conftest was loaded')\n",
    "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p this_plugin_does_not_exist'\n",
    "conformance/__init__.py": "raise ImportError('conformance imported from the fake project')\n",
    "conformance/suites/__init__.py": "",
}


def test_narrowed_run_in_a_foreign_project_is_partial_scope(tmp_path):
    project = tmp_path / "other-project"
    for rel, text in FAKE_PROJECT_FILES.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    out = project / "reports" / "run1"
    proc = subprocess.run(_command("certify", "--suite", "test_api_versions", "-n", "0", "--out", str(out)),
                          capture_output=True, text=True, env=_env(), cwd=project, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr + (out / "pytest.log").read_text()[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _result_line(proc.stdout).startswith("result: PARTIAL SCOPE")
    log = (out / "pytest.log").read_text()
    assert f"rootdir: {package_root()}" in log
    run = _run_json(out)
    assert run["status"] == "complete" and run["scope"]["narrowed"] is True
    assert run["scope"]["suite_exprs"] == ["test_api_versions"]
    assert run["scope"]["deselected"] > 0 and run["expected_tests"] == run["finished_tests"] > 0
    rows = [json.loads(line) for f in (out / "results").glob("results-*.jsonl") for line in f.read_text().splitlines()]
    assert rows and all(r["verdict"] == "pass" for r in rows)
    _report_result(out, "partial-scope")


def _wait_rows(results: Path, n: int, proc: subprocess.Popen, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        count = sum(len(f.read_text().splitlines()) for f in results.glob("results-*.jsonl"))
        if count >= n:
            return count
        time.sleep(0.5)
    raise AssertionError(f"fewer than {n} result rows after {timeout} s (certify exit {proc.poll()})")


def test_sigint_after_a_few_tests_is_incomplete(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(_command("certify", "-n", "1", "--out", str(out)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    try:
        _wait_rows(out / "results", 3, proc, timeout=300)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, stdout + stderr
    assert "Traceback" not in stdout + stderr
    line = _result_line(stdout)
    assert line.startswith("result: INCOMPLETE (") and "interrupted by SIGINT" in line
    run = _run_json(out)
    assert run["status"] == "interrupted" and run["interrupted"]["signal"] == "SIGINT"
    assert 3 <= run["finished_tests"] < run["expected_tests"]
    assert any("interrupted by SIGINT after" in r for r in run["reasons"])
    _report_result(out, "incomplete")


def test_time_limit_stops_the_run_as_incomplete(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(_command("certify", "-n", "0", "--time-limit", "2", "--no-allure", "--out", str(out)),
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "stopped by --time-limit 2 s" in _result_line(proc.stdout)
    run = _run_json(out)
    assert run["status"] == "interrupted"
    _report_result(out, "incomplete")
