"""What the plugin records about a run beyond verdicts: evidence on failing rows (with
the test's last raw-client exchanges against the real reference broker), a crashed xdist
worker, and a target that does not start (one line per test, status in run.json)."""

from __future__ import annotations

import json
import textwrap

import pytest
from reference_impl.protocol.api_keys import ApiKey

pytest_plugins = ("pytester",)

CATALOG = """\
kip: TEST
title: run record test catalog
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


def _setup(pytester: pytest.Pytester, monkeypatch, source: str, conftest: str | None = None):
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    if conftest:
        pytester.makeconftest(conftest)
    (pytester.path / "catalog").mkdir()
    (pytester.path / "catalog" / "test.yaml").write_text(CATALOG)
    (pytester.path / "conformance" / "suites").mkdir(parents=True)
    (pytester.path / "conformance" / "suites" / "test_x.py").write_text(textwrap.dedent(source))
    return ("-p", "no:cacheprovider", "--kipcheck-catalog", str(pytester.path / "catalog"),
            "--kipcheck-results", str(pytester.path / "results"))


def _rows(pytester):
    return [json.loads(line) for f in (pytester.path / "results").glob("results-*.jsonl")
            for line in f.read_text().splitlines()]


def test_failing_row_carries_assertion_and_last_exchanges(pytester, monkeypatch):
    base = _setup(pytester, monkeypatch, '''
        import pytest
        from reference_impl.client.raw_client import RawClient

        @pytest.mark.requirement("TEST.A.001")
        def test_fails_after_exchanges(target):
            with RawClient.connect(target.bootstrap_servers) as client:
                for _ in range(8):
                    client.request(18, 0)
            assert 1 == 2, "the broker said something else"

        @pytest.mark.requirement("TEST.A.001")
        def test_passes(target):
            pass
    ''')
    pytester.runpytest_subprocess(*base, "--target", "reference", timeout=180)
    rows = {r["test"]: r for r in _rows(pytester)}
    assert "evidence" not in rows["test_passes"]
    ev = rows["test_fails_after_exchanges"]["evidence"]
    assert "the broker said something else" in ev["assertion"]
    assert len(ev["exchanges"]) == 6  # the last 6 of 8 (plus the target's own probes before the test)
    assert all(x["api_key"] == ApiKey.API_VERSIONS and x["version"] == 0 and x["request"] and x["response"] for x in ev["exchanges"])
    assert set(ev) == {"assertion", "exchanges", "observation", "log_tail", "log_path"}


CRASH_CONFTEST = '''
import pytest
from targets.target import Capabilities, Target


class FakeTarget(Target):
    bootstrap_servers = "127.0.0.1:1"

    def start(self):
        if self.spec.option("fail"):
            raise RuntimeError("broker exploded\\nsecond line of a long story")

    def stop(self):
        pass

    def capabilities(self, refresh=False):
        return Capabilities(api_versions={18: (0, 4)})


@pytest.hookimpl
def pytest_kipcheck_create_target(spec, config):
    return FakeTarget(spec)
'''


def test_crashed_worker_is_an_internal_error(pytester, monkeypatch):
    base = _setup(pytester, monkeypatch, '''
        import os
        import pytest

        @pytest.mark.requirement("TEST.A.001")
        def test_a_dies(target):
            os._exit(3)

        @pytest.mark.requirement("TEST.A.001")
        def test_b_fine(target):
            pass
    ''', CRASH_CONFTEST)
    pytester.runpytest_subprocess(*base, "-n", "1", "--target", "reference", timeout=180)
    run = json.loads((pytester.path / "results" / "run.json").read_text())
    assert run["status"] == "internal_error", run
    assert run["worker_crashes"] and any("test_a_dies" in c for c in run["worker_crashes"])


def test_target_that_does_not_start_is_recorded_and_fails_fast(pytester, monkeypatch):
    base = _setup(pytester, monkeypatch, '''
        import pytest

        @pytest.mark.requirement("TEST.A.001")
        @pytest.mark.parametrize("n", range(20))
        def test_many(target, n):
            pass
    ''', CRASH_CONFTEST)
    result = pytester.runpytest_subprocess(*base, "--target", "reference:fail=1", timeout=180)
    rows = _rows(pytester)
    assert len(rows) == 20 and {r["verdict"] for r in rows} == {"error"}
    assert all(r["reason"] == "setup: Failed: target reference:fail=1 failed to start: RuntimeError: broker exploded" for r in rows)
    out = result.stdout.str()
    assert "Traceback" not in out and "second line of a long story" not in out
    assert len(result.stdout.lines) < 15 * len(rows)  # a few lines per test, no stack per test
    run = json.loads((pytester.path / "results" / "run.json").read_text())
    assert run["status"] == "target_unreachable"
    assert "broker exploded" in run["unreachable_targets"]["reference:fail=1"]


def test_collection_error_is_not_mistaken_for_an_interrupt(pytester, monkeypatch):
    base = _setup(pytester, monkeypatch, """
        import pytest

        @pytest.mark.requirement("TEST.A.001")
        def test_fine(target):
            pass
    """, CRASH_CONFTEST)
    (pytester.path / "conformance" / "suites" / "test_broken.py").write_text("def oops(:\n")
    pytester.runpytest_subprocess(*base, "--target", "reference", timeout=180)
    run = json.loads((pytester.path / "results" / "run.json").read_text())
    assert run["status"] == "internal_error" and run["interrupted"] is None
    assert any("stopped early" in r for r in run["reasons"])
