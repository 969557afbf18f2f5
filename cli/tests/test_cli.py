"""The `kipcheck` command line (cli/)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli import certify, main
from reference_impl.protocol.api_keys import ApiKey
from targets.target import probe_capabilities

REPO = Path(__file__).resolve().parents[2]

CATALOG = """\
kip: KIP-98
title: Exactly Once Delivery and Transactional Messaging
seed: null
status: adopted
requirements:
  - id: KIP-98.IDEMP.001
    section: "Idempotent producer"
    level: must
    behaviour: Duplicate batches are not appended twice.
    oracle: Send the same batch twice.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.001
    section: "Transactions"
    level: must
    behaviour: Aborted records are invisible to read_committed consumers.
    oracle: Abort, then fetch.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.002
    section: "Transactions"
    level: should
    behaviour: Nobody tests this one.
    oracle: Nothing.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
"""


def _row(nodeid, target, reqs, verdict, reason=""):
    return {
        "nodeid": nodeid, "test": nodeid.rsplit("::", 1)[-1], "suite": "s", "target": target,
        "target_kind": target.split(":")[0], "target_version": None, "requirements": reqs,
        "verdict": verdict, "reason": reason, "duration_s": 0.1, "divergences": [],
    }


@pytest.fixture()
def catalog_dir(tmp_path: Path) -> Path:
    d = tmp_path / "catalog"
    d.mkdir()
    (d / "kip-98.yaml").write_text(CATALOG)
    return d


def _results(d: Path, rows) -> Path:
    d.mkdir(parents=True)
    (d / "results-gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "targets-gw0.json").write_text(json.dumps({
        "reference": {"describe": {"spec": "reference", "kind": "reference", "version": "reference", "nodes": 1,
                                   "bootstrap": "127.0.0.1:1", "startup_seconds": 0.1},
                      "capabilities": {"finalized_features": {"transaction.version": 2}}},
    }))
    return d


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


# ---------------------------------------------------------------------------------
# parsing and usage errors


def test_help_lists_every_command(capsys):
    assert main.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("certify", "report", "catalog", "broker", "target"):
        assert command in out
    for command in (["certify"], ["report"], ["catalog"], ["broker"], ["target"], ["target", "up"]):
        assert main.main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--suite" in out and "--kipcheck" not in out


def test_help_as_a_subprocess():
    p = run_cli("--help")
    assert p.returncode == 0
    assert "certify" in p.stdout


def test_no_command_is_a_usage_error(capsys):
    assert main.main([]) == 2
    assert "error" in capsys.readouterr().err


def test_bad_target_spec_exits_2_with_message():
    p = run_cli("certify", "--target", "bogus:1.0", "--out", os.devnull)
    assert p.returncode == 2
    assert "bad --target 'bogus:1.0'" in p.stderr
    assert "unknown target kind" in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_nodes_in_spec(capsys, tmp_path):
    assert main.main(["certify", "-t", "reference:nodes=zero", "--out", str(tmp_path)]) == 2
    assert "nodes must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # nothing started


def test_certify_rejects_stray_arguments(capsys, tmp_path):
    assert main.main(["certify", "stray", "--out", str(tmp_path)]) == 2
    assert "after `--`" in capsys.readouterr().err
    assert main.main(["certify", "-n", "many", "--out", str(tmp_path)]) == 2


def test_target_up_reference_until_sigterm():
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "target", "up", "reference"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap=127.0.0.1:"), line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_target_up_bad_spec(capsys):
    assert main.main(["target", "up", "nope"]) == 2
    assert "unknown target kind" in capsys.readouterr().err


def test_pytest_command_shape(tmp_path):
    cmd = certify.pytest_command(["reference", "kafka-native:4.1.0"], tmp_path / "r", tmp_path / "a", ["kip98", "proto"], "2", ["-x"])
    assert cmd[:5] == [sys.executable, "-m", "pytest", "--pyargs", "conformance.suites"]
    assert "no:cacheprovider" in cmd
    joined = " ".join(cmd)
    assert "--target reference --target kafka-native:4.1.0" in joined
    assert f"--kipcheck-results {tmp_path / 'r'}" in joined
    assert f"--alluredir {tmp_path / 'a'}" in joined
    assert cmd[cmd.index("-n") + 1] == "2"
    assert cmd[cmd.index("--maxschedchunk") + 1] == "1"  # spread_slow order: workers follow it closely
    assert "--maxschedchunk" not in certify.pytest_command(["reference"], tmp_path / "r", None, None, "0")
    assert cmd[cmd.index("-k") + 1] == "(kip98) or (proto)"
    assert cmd[-1] == "-x"


# ---------------------------------------------------------------------------------
# report


def test_report_rebuilds_from_results(tmp_path, catalog_dir, capsys):
    results = _results(tmp_path / "run" / "results", [
        _row("s/t.py::test_dedup", "reference", ["KIP-98.IDEMP.001"], "pass"),
        _row("s/t.py::test_abort", "reference", ["KIP-98.TXN.001"], "fail", "saw an aborted record"),
    ])
    rc = main.main(["report", str(results), "--catalog", str(catalog_dir), "--divergences", str(tmp_path / "none.yaml")])
    assert rc == 1
    out_dir = tmp_path / "run"  # default: the parent of a dir named results
    report = json.loads((out_dir / "report.json").read_text())
    assert report["summary"]["result"] == "fail"
    assert report["kips"][0]["per_target"]["reference"]["verdict"] == "non-compliant"
    html = (out_dir / "report.html").read_text()
    assert "non-compliant" in html and "saw an aborted record" in html
    out = capsys.readouterr().out
    assert "KIP-98" in out and "report.html" in out and "result: FAIL" in out


def test_report_all_pass_exits_0_and_out_option(tmp_path, catalog_dir):
    results = _results(tmp_path / "res", [_row("s/t.py::test_dedup", "reference", ["KIP-98.IDEMP.001"], "pass")])
    out = tmp_path / "elsewhere"
    rc = main.main(["report", str(results), "--out", str(out), "--catalog", str(catalog_dir), "--format", "json"])
    assert rc == 0
    assert (out / "report.json").is_file() and not (out / "report.html").exists()
    report = json.loads((out / "report.json").read_text())
    assert report["kips"][0]["per_target"]["reference"]["verdict"] == "compliant"
    assert report["kips"][0]["untested"] == ["KIP-98.TXN.001", "KIP-98.TXN.002"]


def test_report_as_a_subprocess(tmp_path, catalog_dir):
    results = _results(tmp_path / "res", [_row("s/t.py::test_dedup", "reference", ["KIP-98.IDEMP.001"], "pass")])
    p = run_cli("report", str(results), "--out", str(tmp_path / "o"), "--catalog", str(catalog_dir))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "report.html").is_file()


def test_report_missing_or_empty_results(tmp_path, catalog_dir, capsys):
    assert main.main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main.main(["report", str(tmp_path / "empty"), "--catalog", str(catalog_dir)]) == 2
    assert "no result rows" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# catalog


def test_catalog_lists_requirements(catalog_dir, capsys):
    assert main.main(["catalog", "--catalog", str(catalog_dir), "--no-collect"]) == 0
    out = capsys.readouterr().out
    assert "KIP-98.IDEMP.001" in out and "KIP-98.TXN.002" in out and "MUST" in out


def test_catalog_unknown_kip(catalog_dir, capsys):
    assert main.main(["catalog", "--catalog", str(catalog_dir), "--kip", "932", "--no-collect"]) == 2
    assert "unknown KIP KIP-932" in capsys.readouterr().err


def test_catalog_with_results_and_untested(tmp_path, catalog_dir, capsys):
    results = _results(tmp_path / "res", [_row("s/t.py::test_dedup", "reference", ["KIP-98.IDEMP.001"], "pass")])
    assert main.main(["catalog", "--catalog", str(catalog_dir), "--kip", "KIP-98", "--results", str(results), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {r["id"]: r for r in data["requirements"]}
    assert by_id["KIP-98.IDEMP.001"]["verdicts"] == {"reference": "pass"}
    assert by_id["KIP-98.TXN.001"]["verdicts"] == {"reference": "untested"}
    assert main.main(["catalog", "--catalog", str(catalog_dir), "--results", str(results), "--untested"]) == 0
    out = capsys.readouterr().out
    assert "KIP-98.TXN.001" in out and "KIP-98.IDEMP.001" not in out


def test_catalog_untested_needs_coverage(catalog_dir, capsys):
    assert main.main(["catalog", "--catalog", str(catalog_dir), "--untested", "--no-collect"]) == 2
    assert "--untested needs" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# certify: the orchestration, with a stand-in suite and plugin (independent of the real ones)

FAKE_PLUGIN = '''
import json, os, pytest

def pytest_addoption(parser):
    parser.addoption("--target", action="append", default=[])
    parser.addoption("--kipcheck-results")

def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(*ids): requirement ids")

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        return
    out = item.config.getoption("--kipcheck-results")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    target = (item.config.getoption("--target") or ["reference"])[0]
    reqs = [a for m in item.iter_markers("requirement") for a in m.args]
    verdict = "pass" if rep.passed else "skipped" if rep.skipped else "fail"
    row = {"nodeid": item.nodeid, "test": item.name, "suite": "fake", "target": target,
           "target_kind": target.split(":")[0], "target_version": None, "requirements": reqs,
           "verdict": verdict, "reason": "", "duration_s": rep.duration, "divergences": []}
    with open(os.path.join(out, f"results-{worker}.jsonl"), "a") as fh:
        fh.write(json.dumps(row) + "\\n")
    with open(os.path.join(out, f"targets-{worker}.json"), "w") as fh:
        json.dump({target: {"describe": {"spec": target, "kind": "reference", "nodes": 1}, "capabilities": {}}}, fh)
'''

FAKE_SUITE = '''
import os, pytest

@pytest.mark.requirement("PROTO.APIVER.001")
def test_apiversions_fake():
    pass

@pytest.mark.requirement("PROTO.APIVER.002")
def test_maybe_fails():
    assert not os.environ.get("KC_FAKE_FAIL")
'''


@pytest.fixture()
def fake_suites(tmp_path, monkeypatch):
    pkg = tmp_path / "kc_fake_suites"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "test_fake.py").write_text(textwrap.dedent(FAKE_SUITE))
    (tmp_path / "kc_fake_plugin.py").write_text(textwrap.dedent(FAKE_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(certify, "SUITES_PACKAGE", "kc_fake_suites")
    monkeypatch.setattr(certify, "PLUGIN_MODULE", "kc_fake_plugin")
    monkeypatch.setattr(certify, "plugin_registered", lambda: False)
    # Keep the real conformance plugin (entry point `kipcheck`) out of the stand-in run.
    return ["--", "-p", "no:kipcheck"]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_certify_orchestration(fake_suites, tmp_path, capsys, workers):
    out = tmp_path / "report"
    (out / "results").mkdir(parents=True)
    stale = out / "results" / "stale.jsonl"
    stale.write_text(json.dumps(_row("old::t", "reference", [], "fail")) + "\n")
    # rows an earlier run wrote (its manifest lists them) are cleared (cli/out_manifest.py)
    (out / ".kipcheck-manifest.json").write_text(json.dumps(
        {"files": {"results/stale.jsonl": hashlib.sha256(stale.read_bytes()).hexdigest()}}))
    rc = main.main(["certify", "--out", str(out), "-n", workers, "-q", *fake_suites])
    text = capsys.readouterr()
    assert rc == 0, text.out + text.err + (out / "pytest.log").read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["tests_total"] == 2  # the stale row was cleared
    assert [t["spec"] for t in report["targets"]] == ["reference"]
    assert report["run"]["pytest_exit_code"] == 0 and report["run"]["wall_time_s"] > 0
    assert (out / "report.html").is_file()
    assert any((out / "allure-results").glob("*-result.json"))
    assert (out / "allure-results" / "environment.properties").is_file()
    assert "report.html" in text.out and "result: PASS" in text.out


def test_certify_failure_exits_1_and_suite_filter(fake_suites, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KC_FAKE_FAIL", "1")
    out = tmp_path / "r1"
    assert main.main(["certify", "--out", str(out), "-n", "0", "-q", "--no-allure", *fake_suites]) == 1
    assert not (out / "allure-results").exists()
    # --suite narrows to the passing test
    out2 = tmp_path / "r2"
    assert main.main(["certify", "--out", str(out2), "-n", "0", "-q", "--suite", "apiversions", *fake_suites]) == 0
    report = json.loads((out2 / "report.json").read_text())
    assert report["summary"]["tests_total"] == 1
    # nothing selected -> infrastructure error
    assert main.main(["certify", "--out", str(tmp_path / "r3"), "-n", "0", "-q", "--suite", "nomatch", *fake_suites]) == 2
    assert "no conformance test was selected" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# certify against the real suites (needs conformance/suites to contain tests)


def _real_suites_present() -> bool:
    d = REPO / "conformance" / "suites"
    return d.is_dir() and any(d.rglob("test_*.py"))


@pytest.mark.slow
@pytest.mark.skipif(not _real_suites_present(), reason="conformance/suites has no tests yet")
def test_certify_reference_end_to_end(tmp_path):
    out = tmp_path / "cert"
    p = run_cli("certify", "--target", "reference", "--suite", "apiversions or api_versions",
                "--out", str(out), "-n", "1", "-q", timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    # --suite narrows the selection: every selected test passed, but that is no full certification.
    assert report["summary"]["result"] == "partial-scope"
    assert report["summary"]["tests"]["pass"] >= 1
    assert report["targets"][0]["spec"] == "reference" and report["targets"][0]["kind"] == "reference"
    assert (out / "report.html").is_file()
    assert any((out / "allure-results").iterdir())


# ---------------------------------------------------------------------------------
# broker


def _start_broker(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "broker", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_broker_prints_bootstrap_and_stops_on_sigterm():
    proc = _start_broker("--port", "0", "--brokers", "2")
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap="), line + proc.stderr.read() if proc.poll() is not None else line
        bootstrap = line.split("=", 1)[1]
        assert len(bootstrap.split(",")) == 2
        caps = probe_capabilities(bootstrap.split(",")[0], timeout=10)
        assert caps.supports_api(ApiKey.API_VERSIONS)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_broker_port_in_use_exits_2():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = _start_broker("--port", str(port))
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in err
        assert "Traceback" not in err


def test_broker_bad_arguments(capsys):
    assert main.main(["broker", "--brokers", "0"]) == 2
    assert "argument --brokers: 0 must be >= 1" in capsys.readouterr().err
    assert main.main(["broker", "--port", "70000"]) == 2
