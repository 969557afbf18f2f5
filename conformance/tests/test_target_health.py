"""A target that stops answering mid-run (conformance/target_health.py, issue 24 item 5):
reported as down after the test whose request brought it down, later tests "not run:
target down" and never failures of their requirements; a target that answers again is
used again."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest

from conformance.target_health import NOT_RUN_PREFIX, TargetHealth
from reports import certification as cert

pytest_plugins = ("pytester",)

T = SimpleNamespace()  # the health object never looks into the target: the probe does


class FakeProbe:
    def __init__(self, answers: list[bool]) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, target: object) -> str | None:
        self.calls += 1
        ok = self.answers.pop(0) if self.answers else False
        return None if ok else "ConnectionRefusedError: refused"


def test_a_target_that_never_answered_is_not_watched():
    probe = FakeProbe([False])
    health = TargetHealth(probe, pause_s=0)
    health.watch("s", T)
    assert health.check("s", T) is None and probe.calls == 1  # no probe per test for it


def test_down_after_the_last_test_then_resumed():
    probe = FakeProbe([True, True, False, False, False, True])
    health = TargetHealth(probe, attempts=3, pause_s=0, recheck_s=0)
    health.watch("s", T)
    assert health.check("s", T) is None
    health.test_ran("s", "suite::test_b", [{"api": "DescribeGroups", "version": 5, "node": "127.0.0.1:9092"}])
    down = health.check("s", T)
    assert down is not None and down.after == "suite::test_b" and down.last_request.startswith("DescribeGroups v5")
    assert down.reason().startswith(NOT_RUN_PREFIX)
    assert health.check("s", T) is None  # answers again
    assert health.resumed("s")["after"] == "suite::test_b" and health.resumed("s") is None


def test_one_slow_probe_is_not_a_dead_target():
    probe = FakeProbe([True, False, True])
    health = TargetHealth(probe, attempts=3, pause_s=0)
    health.watch("s", T)
    assert health.check("s", T) is None and probe.calls == 3


CONFTEST = '''
import pytest
from reference_impl.protocol.api_keys import ApiKey
from targets.reference_target import ReferenceTarget


class Silence:
    """Per-request hook: from the first DescribeGroups on, the broker answers nothing
    (it stops answering after a given request, as a broker that panicked would)."""

    def __init__(self):
        self.dead = False

    def decide(self, node_id, api_key, api_version, frame):
        self.dead = self.dead or api_key == ApiKey.DESCRIBE_GROUPS
        return type("V", (), {"action": "drop", "delay_s": 0, "error_code": None}) if self.dead else None

    def error_frame(self, *args):
        raise AssertionError("never asked")


@pytest.hookimpl
def pytest_kipcheck_create_target(spec, config):
    target = ReferenceTarget(spec)
    target.install_request_hook(Silence())
    return target
'''

CATALOG = """\
kip: TEST
title: health test catalog
seed: null
status: protocol
requirements:
  - id: TEST.A.001
    section: s
    level: must
    behaviour: b1
    oracle: o1
    implemented_in: {apache-kafka: ">=2.0", reference: true}
  - id: TEST.A.002
    section: s
    level: must
    behaviour: b2
    oracle: o2
    implemented_in: {apache-kafka: ">=2.0", reference: true}
"""

SUITE = '''
import pytest

pytestmark = [pytest.mark.deadline(20)]


@pytest.mark.requirement("TEST.A.001")
def test_a_answers(target):
    with target.raw_client() as c:
        assert c.api_versions()


@pytest.mark.requirement("TEST.A.001")
def test_b_the_request_that_kills_it(target):
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    with target.raw_client(timeout=2) as c:
        c.send(DescribeGroupsRequest(groups=("g",), include_authorized_operations=False))


@pytest.mark.requirement("TEST.A.002")
def test_c_later(target):
    with target.raw_client() as c:
        assert c.api_versions()


@pytest.mark.requirement("TEST.A.002")
def test_d_later_still(target):
    with target.raw_client() as c:
        assert c.api_versions()
'''


@pytest.mark.deadline(240)
def test_a_broker_that_dies_mid_run_is_reported_down_after_the_right_test(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "catalog").mkdir()
    (pytester.path / "catalog" / "test.yaml").write_text(CATALOG)
    (pytester.path / "conformance" / "suites").mkdir(parents=True)
    (pytester.path / "conformance" / "suites" / "test_dies.py").write_text(textwrap.dedent(SUITE))
    out = pytester.path / "results"
    pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--kipcheck-catalog", str(pytester.path / "catalog"),
        "--kipcheck-results", str(out), "--target", "reference", timeout=200,
    )
    rows = {json.loads(line)["test"]: json.loads(line) for line in (out / "results-main.jsonl").read_text().splitlines()}
    assert rows["test_a_answers"]["verdict"] == "pass"
    for name in ("test_c_later", "test_d_later_still"):
        assert rows[name]["verdict"] == "not_run", rows[name]
        assert rows[name]["target_down"]["after"].endswith("test_b_the_request_that_kills_it[reference]")
        assert rows[name]["target_down"]["last_request"].startswith("DescribeGroups v5")
    report = cert.build_report_from_dir(out, catalog_path=pytester.path / "catalog",
                                        register_path=out / "none.yaml", deviations_path=out / "none")
    banner = report["summary"]["banner"]
    assert banner.startswith("TARGET DOWN: target reference stopped answering after "), banner
    assert "test_b_the_request_that_kills_it" in banner and "2 test(s) not run: target down" in banner
    assert report["summary"]["result"] != "pass" and cert.exit_code(report) != 0
    req = {r["id"]: r for r in report["requirements"]}
    assert req["TEST.A.002"]["per_target"]["reference"]["verdict"] == "untested"  # never charged as a failure
