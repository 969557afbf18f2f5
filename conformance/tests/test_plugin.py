"""The kipcheck pytest plugin, exercised through pytester with fake targets.

Fake targets come from a conftest implementing ``pytest_kipcheck_create_target``; no
broker runs. Test files live under ``conformance/suites/`` in the pytester directory
(without ``__init__.py`` so the real ``conformance`` package is not shadowed).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml  # noqa: F401 - see below


# The in-process runs below (pytester.runpytest) drop every module first imported inside them.
# PyYAML's libyaml extension cannot be re-initialised: a yaml package re-imported after such a
# run would pair the new package's constructors with the first package's node classes
# ("could not determine a constructor for the tag None"). Importing yaml here keeps one copy.

pytest_plugins = ("pytester",)

CONFTEST = '''
import os
from pathlib import Path

import pytest
from targets.target import Capabilities, Target

LOG = Path(__file__).parent / "lifecycle.log"


class FakeTarget(Target):
    """kind/version from the spec; option fail=1 makes start() raise."""

    @property
    def bootstrap_servers(self):
        return "127.0.0.1:19092"

    @property
    def version(self):
        return "ref-1" if self.kind == "reference" else self.spec.version

    def start(self):
        self.features = {"transaction.version": 2}  # a test may finalize more (FEATURE_UPGRADE)
        with LOG.open("a") as fh:
            fh.write(f"start {self.name} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\\n")
        if self.spec.option("fail"):
            raise RuntimeError("broker exploded")

    def stop(self):
        with LOG.open("a") as fh:
            fh.write(f"stop {self.name}\\n")

    def capabilities(self, refresh=False):
        return Capabilities(api_versions={18: (0, 4), 3: (0, 12)}, finalized_features=dict(self.features))


@pytest.hookimpl
def pytest_kipcheck_create_target(spec, config):
    if spec.kind == "testcontainers":
        return None  # the real TestcontainersTarget (its start() checks the Docker engine)
    return FakeTarget(spec)
'''

CATALOG = """\
kip: TEST
title: plugin test catalog
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
    level: should
    behaviour: b2
    oracle: o2
    implemented_in: {apache-kafka: "no", reference: true}
"""

ROW_KEYS = [
    "nodeid",
    "test",
    "suite",
    "target",
    "target_kind",
    "target_version",
    "requirements",
    "verdict",
    "reason",
    "duration_s",
    "divergences",
]


@pytest.fixture
def kc(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KIPCHECK_TARGETS", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "catalog").mkdir()
    (pytester.path / "catalog" / "test.yaml").write_text(CATALOG)
    (pytester.path / "conformance" / "suites").mkdir(parents=True)
    return pytester


def suite(pytester: pytest.Pytester, name: str, source: str) -> Path:
    path = pytester.path / "conformance" / "suites" / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> pytest.RunResult:
    base = ("-p", "no:cacheprovider", "--kipcheck-catalog", str(pytester.path / "catalog"))
    if subprocess:
        return pytester.runpytest_subprocess(*base, *args)
    return pytester.runpytest(*base, *args)


def rows(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("results-*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines())
    return out


def lifecycle(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "lifecycle.log"
    return log.read_text().splitlines() if log.exists() else []


# -- collection ------------------------------------------------------------------------------------


def test_missing_requirement_marker_in_suites_is_a_collection_error(kc):
    suite(kc, "test_nomark", "def test_x(target):\n    pass\n")
    result = run(kc)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ERROR collecting conformance/suites/test_nomark.py*", "*has no @pytest.mark.requirement*"])


def test_tests_outside_suites_need_no_marker(kc):
    kc.makepyfile(test_plain="def test_x():\n    pass\n")
    run(kc).assert_outcomes(passed=1)


def test_unknown_requirement_id_is_a_collection_error(kc):
    kc.makepyfile(
        test_outside="""
        import pytest
        @pytest.mark.requirement("TEST.A.001", "TEST.Z.009")
        def test_x():
            pass
        """
    )
    result = run(kc)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*unknown requirement id(s) TEST.Z.009*"])


def test_empty_marker_and_bad_target_kinds_are_collection_errors(kc):
    suite(
        kc,
        "test_bad",
        """
        import pytest
        @pytest.mark.requirement()
        def test_empty():
            pass
        @pytest.mark.requirement("TEST.A.001")
        @pytest.mark.target_kinds("kafka-nativ")
        def test_kinds():
            pass
        """,
    )
    result = run(kc)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*requirement() needs at least one requirement id*", "*target_kinds needs kinds from*"])


def test_bad_target_spec_is_a_usage_error(kc):
    result = run(kc, "--target", "kafka-nope:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kipcheck: bad target spec*kafka-nope*"])




ONE_TEST = """
import pytest

@pytest.mark.requirement("TEST.A.001")
def test_x(target):
    pass
"""


def _scoped_run(kc: pytest.Pytester, paths: str) -> pytest.RunResult:
    """test_in.py and test_out.py; kafka-native:9.9 scoped to `paths`: must run test_in only."""
    suite(kc, "test_in", ONE_TEST)
    suite(kc, "test_out", ONE_TEST)
    result = run(kc, "--target", "reference", "--scoped-target", "kafka-native:9.9", paths, "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_in.py::test_x?kafka-native:9.9? PASSED*"])
    assert "test_out.py::test_x[kafka-native:9.9]" not in result.stdout.str()
    return result


def test_scoped_target_runs_only_under_its_paths(kc):
    """--scoped-target adds a target for some suites only (CI runs the secured cluster on
    the protocol and KIP-98 suites); every other target still runs everything."""
    _scoped_run(kc, "conformance/suites/test_in.py")


def test_scoped_target_leaves_out_the_paths_marked_with_a_bang(kc):
    """`!PATH` leaves a path out (CI runs Kafka's own crash tests on containers only); a
    scope of exclusions alone covers everything else."""
    _scoped_run(kc, "!conformance/suites/test_out.py")
    only_bangs = run(kc, "--target", "reference", "--scoped-target", "kafka-native:9.9", "!", "-v")
    assert only_bangs.ret == pytest.ExitCode.USAGE_ERROR

# -- target parametrization and lifecycle -------------------------------------------------------------

TWO_TESTS = """
import pytest
from reference_impl.protocol.api_keys import ApiKey

@pytest.mark.requirement("TEST.A.001")
def test_one(target, capabilities):
    assert capabilities.supports_api(ApiKey.API_VERSIONS)

@pytest.mark.requirement("TEST.A.001", "TEST.A.002")
def test_two(target, reference):
    assert reference.kind == "reference"
"""


def test_target_parametrization_ids_and_lazy_single_start(kc):
    suite(kc, "test_two", TWO_TESTS)
    result = run(kc, "-v", "--target", "reference", "--target", "kafka-native:4.4.0")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random(
        [
            "*test_two.py::test_one[[]reference[]] PASSED*",
            "*test_two.py::test_one[[]kafka-native:4.4.0[]] PASSED*",
            "*test_two.py::test_two[[]reference[]] PASSED*",
            "*test_two.py::test_two[[]kafka-native:4.4.0[]] PASSED*",
        ]
    )
    events = lifecycle(kc)
    # each target started once (the reference fixture shares the 'reference' instance), stopped at the end
    assert sorted(e for e in events if e.startswith("start")) == ["start kafka-native:4.4.0 main", "start reference main"]
    assert sorted(e for e in events if e.startswith("stop")) == ["stop kafka-native:4.4.0", "stop reference"]
    assert events.index("stop reference") > events.index("start kafka-native:4.4.0 main")


def test_targets_from_environment_and_comma_lists(kc, monkeypatch):
    suite(kc, "test_two", TWO_TESTS)
    monkeypatch.setenv("KIPCHECK_TARGETS", "kafka-native:3.9.0,external:h1:9092,h2:9092")
    result = run(kc, "--collect-only", "-q")
    result.stdout.fnmatch_lines_random(
        ["*test_one[[]kafka-native:3.9.0[]]", "*test_one[[]external:h1:9092,h2:9092[]]"]
    )
    assert "reference]" not in result.stdout.str()
    # --target wins over the environment
    result = run(kc, "--collect-only", "-q", "--target", "kafka-native:4.0.0")
    assert "kafka-native:3.9.0" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*test_one[[]kafka-native:4.0.0[]]"])


def test_default_target_is_reference(kc):
    suite(kc, "test_two", TWO_TESTS)
    result = run(kc, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_one[[]reference[]]", "*test_two[[]reference[]]"])


def test_target_that_fails_to_start_fails_its_tests(kc):
    suite(kc, "test_two", TWO_TESTS)
    result = run(kc, "--target", "kafka-native:4.0.0:fail=1")
    # setup errors, not skips; start attempted once for both tests
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*target kafka-native:4.0.0:fail=1 failed to start: RuntimeError: broker exploded*"])
    assert [e for e in lifecycle(kc) if e.startswith("start kafka")] == ["start kafka-native:4.0.0:fail=1 main"]


def test_testcontainers_without_docker_is_skipped_with_reason(kc, monkeypatch):
    pytest.importorskip("targets.testcontainers_target")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{kc.path}/no-docker.sock")
    suite(kc, "test_two", TWO_TESTS)
    result = run(kc, "-rs", "--target", "testcontainers:apache/kafka:3.9.0")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] *testcontainers target testcontainers:apache/kafka:3.9.0 skipped: "
            "DOCKER_HOST=unix://*no-docker.sock does not answer; kipcheck starts no engine there*",
            "SKIPPED target testcontainers:apache/kafka:3.9.0: *does not answer*",
        ]
    )


def test_target_kinds_marker_skips_other_kinds(kc):
    suite(
        kc,
        "test_kinds",
        """
        import pytest
        @pytest.mark.requirement("TEST.A.001")
        @pytest.mark.target_kinds("reference")
        def test_ref_only(target):
            pass
        """,
    )
    result = run(kc, "-rs", "--target", "reference", "--target", "kafka-native:4.0.0")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*restricted to target kinds reference*"])


# -- verdicts and result rows ---------------------------------------------------------------------------

VERDICT_SUITE = """
import pytest
from targets.target import NotSupportedByTarget
from conformance.suites import require_feature

@pytest.mark.requirement("TEST.A.001")
def test_pass(target):
    pass

@pytest.mark.requirement("TEST.A.001")
def test_fail(target):
    assert target.kind == "nothing"

@pytest.mark.requirement("TEST.A.002")
def test_not_supported_in_body(target):
    raise NotSupportedByTarget("no TxnShareAcknowledge (api 93)")

@pytest.fixture
def needs_share(capabilities):
    require_feature(capabilities, "share.version", 2)

@pytest.mark.requirement("TEST.A.002")
def test_not_supported_in_fixture(needs_share):
    pass

@pytest.mark.requirement("TEST.A.001")
def test_skipped(target):
    pytest.skip("plain skip")

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

@pytest.mark.requirement("TEST.A.001")
def test_error(target, broken):
    pass
"""


def test_not_supported_is_reported_as_skip_never_pass(kc):
    suite(kc, "test_verdicts", VERDICT_SUITE)
    result = run(kc, "-rs", "-k", "not_supported")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "*not supported by target: no TxnShareAcknowledge (api 93)*",
            "*not supported by target: feature share.version=2 is not finalized (target has share.version=0)*",
        ]
    )


def test_result_rows(kc):
    suite(kc, "test_verdicts", VERDICT_SUITE)
    kc.makepyfile(test_unrelated="def test_plain():\n    pass\n")
    out = kc.path / "results"
    result = run(kc, "--kipcheck-results", str(out), "--target", "kafka-native:4.1.0")
    result.assert_outcomes(passed=2, failed=1, skipped=3, errors=1)
    result.stdout.fnmatch_lines(["*verdicts: 1 pass, 1 fail, 2 not_supported, 1 error, 1 skipped*"])
    got = {r["test"]: r for r in rows(out)}
    assert set(got) == {
        "test_pass",
        "test_fail",
        "test_not_supported_in_body",
        "test_not_supported_in_fixture",
        "test_skipped",
        "test_error",
    }  # test_unrelated (outside suites, no marker, no target) is not a conformance row
    for row in got.values():
        assert list(row)[: len(ROW_KEYS)] == ROW_KEYS
        assert ("evidence" in row) == (row["verdict"] != "pass")  # evidence on every non-pass row
    assert got["test_pass"] == {
        "nodeid": "conformance/suites/test_verdicts.py::test_pass[kafka-native:4.1.0]",
        "test": "test_pass",
        "suite": "verdicts",
        "target": "kafka-native:4.1.0",
        "target_kind": "kafka-native",
        "target_version": "4.1.0",
        "requirements": ["TEST.A.001"],
        "verdict": "pass",
        "reason": None,
        "duration_s": got["test_pass"]["duration_s"],
        "divergences": [],
    }
    assert isinstance(got["test_pass"]["duration_s"], float)
    assert got["test_fail"]["verdict"] == "fail" and "assert 'kafka-native' == 'nothing'" in got["test_fail"]["reason"]
    assert got["test_not_supported_in_body"]["verdict"] == "not_supported"
    assert got["test_not_supported_in_body"]["reason"] == "not supported by target: no TxnShareAcknowledge (api 93)"
    assert got["test_not_supported_in_fixture"]["verdict"] == "not_supported"
    assert got["test_skipped"] == {**got["test_skipped"], "verdict": "skipped", "reason": "plain skip"}
    assert got["test_error"]["verdict"] == "error" and "fixture broke" in got["test_error"]["reason"]

    targets = json.loads((out / "targets-main.json").read_text())
    assert targets["worker"] == "main"
    kn = targets["targets"]["kafka-native:4.1.0"]
    assert kn["describe"]["spec"] == "kafka-native:4.1.0" and kn["describe"]["bootstrap"] == "127.0.0.1:19092"
    assert kn["capabilities"]["api_versions"] == {"3": [0, 12], "18": [0, 4]}
    assert kn["start_error"] is None
    session = json.loads((out / "session.json").read_text())
    assert session["targets"] == ["kafka-native:4.1.0"] and session["verdicts"]["not_supported"] == 2


FEATURE_UPGRADE = """
import pytest

@pytest.mark.requirement("TEST.A.001")
def test_upgrade(target):
    target.features["share.version"] = 2  # as the KIP-1289 suite finalizes share.version=2
"""


def test_a_target_is_described_with_the_features_it_started_with(kc):
    suite(kc, "test_upgrade", FEATURE_UPGRADE)
    out = kc.path / "results"
    run(kc, "--kipcheck-results", str(out)).assert_outcomes(passed=1)
    ref = json.loads((out / "targets-main.json").read_text())["targets"]["reference"]
    assert ref["capabilities"]["finalized_features"] == {"transaction.version": 2}


def test_results_dir_is_cleaned_of_previous_runs(kc):
    suite(kc, "test_two", TWO_TESTS)
    out = kc.path / "results"
    out.mkdir()
    (out / "results-gw7.jsonl").write_text('{"stale": true}\n')
    (out / "keep.txt").write_text("not ours")
    run(kc, "--kipcheck-results", str(out)).assert_outcomes(passed=2)
    assert not (out / "results-gw7.jsonl").exists() and (out / "keep.txt").exists()
    assert len(rows(out)) == 2


def test_unique_names(kc):
    suite(
        kc,
        "test_unique",
        """
        import pytest
        SEEN = []
        @pytest.mark.requirement("TEST.A.001")
        @pytest.mark.parametrize("n", [1, 2])
        def test_u(unique, n):
            names = [unique.topic(), unique.topic(), unique.group(), unique.transactional_id()]
            assert len(set(names)) == 4
            assert all("-main-test_u_" in x for x in names), names
            SEEN.extend(names)
            assert len(set(SEEN)) == len(SEEN)
        """,
    )
    run(kc).assert_outcomes(passed=2)


# -- differential -----------------------------------------------------------------------------------------

DIFF_SUITE = """
import pytest

def observe(target, ids):
    # the reference answers 85, everyone else 88; producer ids differ but normalize away
    return {
        "topic": ids.topic(),
        "producer_id": 1 if target.kind == "reference" else 4000,
        "error_code": 85 if target.kind == "reference" else 88,
    }

@pytest.mark.requirement("TEST.A.001")
def test_diff(differential):
    res = differential.run(observe)
    # the oracle: the target's own observations decide
    assert res.target["error_code"] in (85, 88)
"""


def test_differential_divergence_recorded_without_failing(kc):
    suite(kc, "test_diff", DIFF_SUITE)
    out = kc.path / "results"
    result = run(kc, "--kipcheck-results", str(out), "--target", "reference", "--target", "kafka-native:4.1.0")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*divergences recorded: 1*"])
    got = {r["target"]: r for r in rows(out)}
    assert got["kafka-native:4.1.0"]["divergences"] == [
        {"requirement": "TEST.A.001", "what": "observe $.error_code", "target": 88, "reference": 85}
    ]
    assert got["reference"]["divergences"] == []  # the reference is not compared with itself


def test_no_differential_option(kc):
    suite(kc, "test_diff", DIFF_SUITE)
    out = kc.path / "results"
    run(kc, "--kipcheck-results", str(out), "--no-differential", "--target", "kafka-native:4.1.0").assert_outcomes(passed=1)
    assert rows(out)[0]["divergences"] == []
    assert [e for e in lifecycle(kc) if e.startswith("start")] == ["start kafka-native:4.1.0 main"]  # no reference started


def test_divergence_does_not_mask_an_oracle_failure(kc):
    suite(kc, "test_diff", DIFF_SUITE.replace("in (85, 88)", "== 85"))
    out = kc.path / "results"
    run(kc, "--kipcheck-results", str(out), "--target", "kafka-native:4.1.0").assert_outcomes(failed=1)
    (row,) = rows(out)
    assert row["verdict"] == "fail" and len(row["divergences"]) == 1


# -- xdist and allure ------------------------------------------------------------------------------------------


def test_xdist_writes_one_results_file_per_worker(kc, monkeypatch):
    # the subprocess runs in the pytester dir, whose conformance/ folder would otherwise
    # shadow the real package
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    suite(kc, "test_verdicts", VERDICT_SUITE)
    suite(kc, "test_diff", DIFF_SUITE)
    out = kc.path / "results"
    result = run(kc, "-n", "2", "--kipcheck-results", str(out), "--target", "kafka-native:4.1.0", subprocess=True)
    result.assert_outcomes(passed=2, failed=1, skipped=3, errors=1)
    result.stdout.fnmatch_lines(["*verdicts: 2 pass, 1 fail, 2 not_supported, 1 error, 1 skipped; divergences recorded: 1*"])
    files = sorted(p.name for p in out.iterdir())
    assert files == ["expected.json", "results-gw0.jsonl", "results-gw1.jsonl", "run.json", "session.json",
                     "targets-gw0.json", "targets-gw1.json"]
    run_json = json.loads((out / "run.json").read_text())
    assert (run_json["status"], run_json["expected_tests"], run_json["finished_tests"]) == ("complete", 7, 7)
    all_rows = rows(out)
    assert len(all_rows) == 7 and len({r["nodeid"] for r in all_rows}) == 7
    starts = [e for e in lifecycle(kc) if e.startswith("start kafka-native")]
    assert sorted(starts) == ["start kafka-native:4.1.0 gw0", "start kafka-native:4.1.0 gw1"]


def test_allure_labels(kc):
    suite(kc, "test_two", TWO_TESTS)
    allure_dir = kc.path / "allure"
    run(kc, "--alluredir", str(allure_dir), "--kipcheck-results", str(kc.path / "res")).assert_outcomes(passed=2)
    results = [json.loads(p.read_text()) for p in allure_dir.glob("*-result.json")]
    assert len(results) == 2
    by_name = {r["name"]: r for r in results}
    labels = {(lab["name"], lab["value"]) for lab in by_name["test_two[reference]"]["labels"]}
    assert {("requirement", "TEST.A.001"), ("requirement", "TEST.A.002"), ("feature", "TEST"), ("target", "reference")} <= labels
    assert ("tag", "TEST.A.002") in labels
    # an allure link is a URL; requirement ids are labels and tags, never links
    assert all("://" in link["url"] for link in by_name["test_two[reference]"].get("links", []))
    # the result row names the allure result (its "uuid" field; allure names the file at random)
    row = next(r for r in rows(kc.path / "res") if r["test"] == "test_two")
    assert row["allure_uuid"] == by_name["test_two[reference]"]["uuid"]
    description = by_name["test_two[reference]"]["description"]
    assert "**TEST.A.002** (should): b2" in description and "o2" in description
