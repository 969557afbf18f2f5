"""One list of CI targets: ./kipcheck-tests, tox's default env and .ci/run agree."""

from __future__ import annotations

import configparser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _suite_args() -> list[str]:
    return (REPO / ".ci" / "suite.args").read_text().split("\n")


def test_kipcheck_tests_and_tox_share_the_suite_args():
    assert '-m pytest @.ci/suite.args "$@"' in (REPO / "kipcheck-tests").read_text()
    tox = configparser.ConfigParser()
    tox.read(REPO / "tox.ini")
    assert "@{toxinidir}/.ci/suite.args" in tox["testenv"]["commands"]
    for step in ("targets.kafka_native.jars --default 4.1 3.9", "chaos.toxiproxy.install", "targets.kfake.build",
                 "image build --kafka 4.4.0"):
        assert step in tox["testenv"]["commands_pre"] and step in (REPO / "kipcheck-tests").read_text()


def test_ci_runs_the_readme_command_verbatim():
    assert (REPO / ".ci" / "run").read_text().strip().endswith("./kipcheck-tests")
    assert "./kipcheck-tests" in (REPO / "README.md").read_text()


def test_suite_args_name_the_readme_targets():
    args = _suite_args()
    targets = [args[i + 1] for i, a in enumerate(args) if a == "--target"]
    assert targets == ["reference", "reference:nodes=3", "librdkafka-mock:nodes=3", "kfake"]
    scoped = [args[i + 1] for i, a in enumerate(args) if a == "--scoped-target"]
    assert scoped == ["kafka-native", "kafka-native:nodes=3", "kafka-native:security=sasl_ssl", "kafka-native:authorizer=standard",
                      "reference:authorizer=standard", "kafka-native:4.1", "kafka-native:3.9", "testcontainers",
                      "testcontainers:nodes=3"]
    readme = (REPO / "README.md").read_text()
    for spec in targets + scoped:
        assert f"`{spec}`" in readme, f"README does not name the CI target {spec}"


def test_the_targets_scoped_in_ci_run_every_suite_nightly():
    """Old Kafka releases, and Kafka 4.4.0's crash files, run in part in .ci/run; all nightly."""
    nightly = (REPO / ".github" / "workflows" / "targets-nightly.yml").read_text()
    args = _suite_args()
    for spec in ("kafka-native", "kafka-native:4.1", "kafka-native:3.9"):
        assert f'"{spec}"' in nightly
        assert spec in args and args[args.index(spec) - 1] == "--scoped-target"
    assert "conformance/suites " in nightly and "cron:" in nightly


def test_containerized_suites_run_on_one_and_three_brokers():
    """.ci/run: the four suites on one and on 3 containerized brokers (issue 11's done-when);
    the nightly runs them too, with the container fault tests."""
    args = _suite_args()
    scope = {args[i + 1]: args[i + 2].split(",") for i, a in enumerate(args) if a == "--scoped-target"}
    four = [f"conformance/suites/{s}" for s in ("protocol", "kip98", "kip447", "kip932")]
    assert scope["testcontainers:nodes=3"] == four
    assert scope["testcontainers"] == four
    nightly = (REPO / ".github" / "workflows" / "containers-nightly.yml").read_text()
    assert '"testcontainers", "testcontainers:nodes=3"' in nightly and "cron:" in nightly
    assert all(s in nightly for s in four)


def test_nightly_marked_tests_leave_ci_for_the_nightly_workflow():
    """Long variants marked `nightly` are deselected by .ci/run and run by tests-nightly.yml."""
    args = _suite_args()
    assert args[args.index("-m") + 1] == "not nightly"
    nightly = (REPO / ".github" / "workflows" / "tests-nightly.yml").read_text()
    assert "pytest -m nightly" in nightly and "cron:" in nightly


def test_ci_schedules_cluster_targets_by_affinity():
    """conformance/scheduling.py: `--dist loadscope` in scope order (slow tests first)."""
    args = _suite_args()
    assert args[args.index("--dist") + 1] == "loadscope" and "--no-loadscope-reorder" in args
