"""Bad input to every subcommand: one line `kipcheck <command>: error: ...` on stderr, exit 2,
no traceback, nothing lost (the table of every bad input: test_cli_bad_input.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from cli import certify, main
from targets.target_up import target_up

PREFIX = re.compile(r"^kipcheck( [a-z]+)?: error: ")


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if PREFIX.match(line)]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def binary_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "results-gw0.jsonl").write_bytes(b"\xff\xfe{\"verdict\": \"pass\"}\n")
    return results


def test_report_on_non_utf8_results_keeps_everything(binary_results, capsys):
    before = sorted(p.name for p in binary_results.iterdir())
    assert main.main(["report", str(binary_results), "--out", str(binary_results)]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "results-gw0.jsonl" in line and "not UTF-8" in line
    assert sorted(p.name for p in binary_results.iterdir()) == before  # nothing written, nothing deleted


def test_catalog_results_non_utf8(binary_results, capsys):
    assert main.main(["catalog", "--no-collect", "--results", str(binary_results)]) == 2
    assert "not UTF-8" in _one_error(capsys.readouterr().err)


def test_report_into_its_own_results_dir_keeps_the_rows(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    row = {"nodeid": "a.py::t[reference]", "test": "t", "suite": "protocol/x", "target": "reference",
           "target_kind": "reference", "target_version": None, "requirements": ["PROTO.APIVER.001"],
           "verdict": "pass", "reason": None, "duration_s": 0.1, "divergences": []}
    (results / "results-main.jsonl").write_text(json.dumps(row) + "\n")
    assert main.main(["report", str(results), "--out", str(results)]) == 0
    assert (results / "results-main.jsonl").read_text() == json.dumps(row) + "\n"
    assert (results / "report.json").is_file()


@pytest.mark.parametrize("argv, needle", [
    (["record", "--upstream", "nonsense", "--out", "TRACE"], "--upstream: expected host:port"),
    (["record", "--upstream", "127.0.0.1:9092", "--listen", "nonsense", "--out", "TRACE"], "--listen: expected host:port"),
    (["record", "--upstream", "127.0.0.1:99999", "--out", "TRACE"], "--upstream: port out of range"),
    (["certify", "-n"], "kipcheck certify: error: argument -n/--workers: expected one argument"),
    (["certify", "--test-timeout", "0"], "argument --test-timeout: 0 must be > 0"),
    (["certify", "--time-limit", "-5"], "argument --time-limit: -5 must be > 0"),
    (["report"], "kipcheck report: error: the following arguments are required"),
])
def test_bad_arguments_one_line_exit_2(argv, needle, tmp_path, capsys):
    argv = [a.replace("TRACE", str(tmp_path / "trace")) for a in argv]
    assert main.main(argv) == 2
    assert needle in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "trace").exists()


def test_image_build_rejects_an_unknown_version_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["image", "build", "--kafka", "9.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kipcheck image: error: ") and "9.9" in err[0]


def test_target_up_bad_spec_prefix(capsys):
    import io

    err = io.StringIO()
    assert target_up("nonsense-kind", err=err) == 2
    assert PREFIX.match(err.getvalue()) and err.getvalue().count("\n") == 1


def test_record_warns_once_when_upstream_is_unreachable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(certify.package_root()), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "record", "--upstream", f"127.0.0.1:{port}",
                             "--out", str(tmp_path / "trace")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(certify.package_root()))
    try:
        first = proc.stdout.readline()
        assert first.startswith("kipcheck record: listening"), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    warnings = [line for line in err.splitlines() if line.startswith("kipcheck record: warning: upstream")]
    assert len(warnings) == 1 and "not reachable" in warnings[0] and "Traceback" not in err
