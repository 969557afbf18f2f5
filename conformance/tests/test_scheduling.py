"""Target-affinity scheduling (conformance/scheduling.py): which unit of work a test id
belongs to, and a cluster target started once per unit and stopped when the unit is done."""

from __future__ import annotations

import pytest

from conformance.scheduling import cluster_spec_of, scope_of
from conformance.tests.test_plugin import kc, run, suite  # noqa: F401 - kc is a fixture

pytest_plugins = ("pytester",)

CLUSTERS = ("kafka-native", "kafka-native:4.1", "testcontainers:nodes=3")


@pytest.mark.parametrize("nodeid, scope", [
    ("conformance/suites/kip932/test_locks.py::test_x[testcontainers:nodes=3]", "testcontainers:nodes=3|kip932"),
    ("conformance/suites/kip98/test_fencing.py::test_x[kafka-native]", "kafka-native|other"),
    ("conformance/suites/protocol/test_metadata.py::test_x[kafka-native:4.1]", "kafka-native:4.1|other"),
    ("conformance/suites/kip98/test_fencing.py::test_x[kafka-native-tv2]", "kafka-native|other"),
    ("conformance/suites/kip98/test_fencing.py::test_x[tv2-kafka-native:4.1]", "kafka-native:4.1|other"),
    ("conformance/suites/kip98/test_fencing.py::test_x[reference]", "conformance/suites/kip98/test_fencing.py"),
    ("conformance/suites/kip98/test_fencing.py::test_x[kafka-native:3.9]", "conformance/suites/kip98/test_fencing.py"),
    ("chaos/tests/test_faults_live.py::test_y[kafka-native:4.4:nodes=3-kill]", "chaos/tests/test_faults_live.py"),
    ("replay/tests/test_replay.py::test_z", "replay/tests/test_replay.py"),
])
def test_scope_is_the_cluster_target_and_suite_bucket_or_else_the_file(nodeid, scope):
    assert scope_of(nodeid, CLUSTERS) == scope


def test_the_longest_matching_spec_wins():
    assert cluster_spec_of("a.py::t[kafka-native:4.1]", CLUSTERS) == "kafka-native:4.1"
    assert cluster_spec_of("a.py::t[kafka-native]", CLUSTERS) == "kafka-native"
    assert cluster_spec_of("a.py::t", CLUSTERS) is None


TWO_TESTS = """
from pathlib import Path

import pytest

LOG = Path(__file__).parents[2] / "lifecycle.log"


@pytest.mark.requirement("TEST.A.001")
@pytest.mark.parametrize("n", [1, 2])
def test_a(target, n):
    with LOG.open("a") as fh:
        fh.write(f"run {target.name}\\n")
"""


def _two_files(kc: pytest.Pytester, workers: str, *targets: str) -> list[str]:
    """Run TWO_TESTS in two files on `targets` under affinity scheduling; the lifecycle log."""
    suite(kc, "test_one", TWO_TESTS)
    suite(kc, "test_two", TWO_TESTS)
    args = [a for t in targets for a in ("--target", t)]
    result = run(kc, "-n", workers, "--dist", "loadscope", "--no-loadscope-reorder", *args, subprocess=True)
    result.assert_outcomes(passed=8)
    return (kc.path / "lifecycle.log").read_text().splitlines()


def test_a_cluster_target_runs_on_one_worker_as_one_unit(kc):  # noqa: F811
    """Two files, two workers: a cluster target's tests all go to one worker, so it starts
    once, not once per worker that got one of the files."""
    log = _two_files(kc, "2", "reference", "kafka-native:9.9")
    assert len([line for line in log if line.startswith("start kafka-native")]) == 1, log


def test_a_cluster_target_stops_when_its_unit_is_done(kc):  # noqa: F811
    """The worker stops the cluster after its last test, while other tests still run."""
    log = _two_files(kc, "1", "kafka-native:9.9", "reference")
    runs = [i for i, line in enumerate(log) if line == "run reference"]
    assert log.index("stop kafka-native:9.9") < runs[-1], log


LIVE_TARGET = """
from pathlib import Path

import pytest

LOG = Path(__file__).parents[3] / "lifecycle.log"


@pytest.mark.requirement("TEST.A.001")
def test_a(target):
    mine = [line for line in LOG.read_text().splitlines() if line.split()[1:2] == [target.name]]
    assert mine[-1].startswith("start"), mine
"""


def test_a_retired_target_is_started_again_by_its_next_unit(kc):  # noqa: F811
    """Two units of one cluster target on one worker (the KIP-932 bucket and the rest): the
    second unit gets a running target again, never the retired instance."""
    for suite_dir in ("kip932", "other"):
        (kc.path / "conformance" / "suites" / suite_dir).mkdir()
        (kc.path / "conformance" / "suites" / suite_dir / f"test_live_{suite_dir}.py").write_text(LIVE_TARGET)
    result = run(kc, "-n", "1", "--dist", "loadscope", "--no-loadscope-reorder", "--target", "kafka-native:9.9",
                 "--target", "reference", subprocess=True)
    result.assert_outcomes(passed=4)
    log = (kc.path / "lifecycle.log").read_text().splitlines()
    assert len([line for line in log if line.startswith("start kafka-native")]) == 2, log


CRASHING_FILE = """
import os
import time
from pathlib import Path

def test_a():
    time.sleep(0.2)

def test_b():
    time.sleep(0.2)

def test_c():
    flag = Path(__file__).parent / "crashed"
    if {crash} and not flag.exists():
        flag.touch()
        os._exit(1)  # as the deadline watchdog ends a worker stuck in a C call
    time.sleep(0.2)
"""


@pytest.mark.parametrize("dist", ["loadscope", "loadfile"])
def test_a_crashed_worker_neither_hangs_the_run_nor_runs_its_test_again(pytester, dist):
    """xdist re-queued a dead worker's finished units and its crashed test: the run hung
    (the landing CI ran out of its 5400 s this way). Now the run ends, the crashed test is
    reported failed once, every other test passes."""
    for i in range(6):
        pytester.makepyfile(**{f"test_f{i}": CRASHING_FILE.format(crash=i == 4)})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", dist, timeout=120)
    result.assert_outcomes(passed=17, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_f4.py::test_c - worker*crashed*"])
