"""Seeded reference bugs (issue 14, item 6): the registry is sound, `reference:bug=` parses
and breaks only the broker under test, and one representative bug is caught by the suite
within a bounded time (the full matrix is the nightly `kipcheck power`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conformance import power
from cli import main
from registers.catalog import get_catalog
from conformance.target_pool import TargetPool
from targets.reference_target import ReferenceTarget, reference_target_config
from targets.target import parse_target_spec
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.seeded_bugs import BUGS, NO_BUGS, SeededBugs

REPO = Path(__file__).resolve().parents[2]
# The cheapest catch: a release at the delivery limit must archive (no lock wait).
REPRESENTATIVE_BUG = bugs.SHARE_DELIVERY_COUNT_FROZEN
REPRESENTATIVE_TESTS = "test_release_at_the_default_delivery_limit_archives"
REPRESENTATIVE_PATH = "conformance/suites/kip932/test_acknowledgements.py"  # collecting all suites is slow
REPRESENTATIVE_BUDGET_S = 60.0


def test_registry_has_at_least_thirty_distinct_bugs():
    names = [b.name for b in BUGS]
    assert len(names) >= 30
    assert len(set(names)) == len(names)
    assert all(b.description and b.kip and b.requirement_ids for b in BUGS)


def test_every_bug_names_catalog_ids():
    catalog = get_catalog()
    unknown = {b.name: [i for i in b.requirement_ids if i not in catalog] for b in BUGS}
    assert not {k: v for k, v in unknown.items() if v}


def test_the_three_named_broken_brokers_are_seeded():
    for name in (bugs.SHARE_ACKS_NOT_APPLIED, bugs.SHARE_ACKS_AFTER_FETCH, bugs.SHARE_DELIVERY_COUNT_FROZEN):
        assert name in bugs.BY_NAME


def test_spec_option_parses_one_or_several_bugs():
    one = ReferenceTarget(parse_target_spec(f"reference:bug={bugs.SHARE_SPSO_FROZEN}"))
    assert one.seeded_bugs.has(bugs.SHARE_SPSO_FROZEN) and not one.seeded_bugs.has(bugs.CRC_NOT_CHECKED)
    two = ReferenceTarget(parse_target_spec(f"reference:bug={bugs.SHARE_SPSO_FROZEN},{bugs.CRC_NOT_CHECKED}"))
    assert two.seeded_bugs.names == {bugs.SHARE_SPSO_FROZEN, bugs.CRC_NOT_CHECKED}


@pytest.mark.parametrize("value", ["no-such-bug", "", f"{bugs.CRC_NOT_CHECKED},typo"])
def test_unknown_or_empty_bug_names_the_known_ones(value):
    with pytest.raises(ValueError) as err:
        parse_target_spec(f"reference:bug={value}")
    assert bugs.CRC_NOT_CHECKED in str(err.value)


def test_certify_rejects_an_unknown_bug_in_one_line(capsys):
    assert main.main(["certify", "--target", "reference:bug=no-such-bug"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown seeded bug(s) no-such-bug" in lines[0] and bugs.CRC_NOT_CHECKED in lines[0]


def test_plain_reference_has_no_bug():
    assert not ReferenceTarget(parse_target_spec("reference")).seeded_bugs
    config = reference_target_config()
    assert config.seeded_bugs is NO_BUGS
    assert config.transaction.seeded_bugs is NO_BUGS and config.share_partition.seeded_bugs is NO_BUGS


def test_bugs_reach_every_config_object():
    seeded = SeededBugs(frozenset({bugs.TXN_TIMEOUT_NEVER_ABORTS}))
    config = reference_target_config(seeded_bugs=seeded)
    assert config.seeded_bugs is seeded
    assert config.transaction.seeded_bugs is seeded and config.share_partition.seeded_bugs is seeded


def test_the_differential_reference_of_a_bugged_target_is_the_plain_reference():
    """A seeded bug changes the broker under test only: the pool keys targets by spec, and
    the reference it compares with is `reference` (or `reference:nodes=N`)."""

    class Pool:
        get = staticmethod(lambda spec: spec)

    for spec, expected in ((f"reference:bug={bugs.CRC_NOT_CHECKED}", "reference"),
                           (f"reference:nodes=3:bug={bugs.CRC_NOT_CHECKED}", "reference:nodes=3")):
        target = ReferenceTarget(parse_target_spec(spec))
        assert TargetPool.reference_for(Pool(), target) == expected


def test_power_cli_rejects_an_unknown_bug_in_one_line(capsys):
    assert main.main(["power", "--bugs", "no-such-bug"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kipcheck power: error: unknown seeded bug(s) no-such-bug")


def test_shards_cover_every_bug_once():
    every = power.select_bugs(None)
    shards = [power.shard_of(every, f"{k}/4") for k in range(4)]
    assert sorted(b.name for s in shards for b in s) == sorted(b.name for b in every)
    assert power.shard_of(every, None) == every


def test_power_cli_rejects_a_bad_shard_in_one_line(capsys):
    assert main.main(["power", "--shard", "4/4"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kipcheck power: error: --shard must be K/N")


def test_tally_counts_failures_as_catches():
    bug = bugs.BY_NAME[bugs.CRC_NOT_CHECKED]
    rows = [{"nodeid": "a", "verdict": "pass"}, {"nodeid": "b", "verdict": "fail"},
            {"nodeid": "c", "verdict": "not_supported"}, {"nodeid": "d", "verdict": "error"}]
    r = power.tally(bug, rows)
    assert (r.tests_run, r.tests_failed, r.not_run, r.catching_tests) == (3, 2, 1, ["b", "d"])
    assert r.caught
    assert not power.tally(bug, rows[:1]).caught
    r.error = "did not finish within 1 s"
    assert r.caught  # a failure seen before the cut-off still counts


def test_nightly_workflow_runs_the_whole_matrix():
    wf = yaml.safe_load((REPO / ".github/workflows/power-nightly.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert on["schedule"][0]["cron"].split()[0].isdigit()
    job = wf["jobs"]["power"]
    assert 0 < job["timeout-minutes"] <= 180
    steps = {s.get("name", s.get("uses")): s for s in job["steps"]}
    run = steps["power matrix"]["run"]
    shards = job["strategy"]["matrix"]["shard"]
    assert shards == list(range(len(shards))) and f"--shard ${{{{ matrix.shard }}}}/{len(shards)}" in run
    assert "kipcheck power" in run and "--out power-out/power.json" in run
    assert steps["upload artefacts"]["if"] == "always()"


def test_representative_bug_is_caught_quickly():
    """Everyday CI's power check: one seeded bug against its cheapest catching test."""
    bug = bugs.BY_NAME[REPRESENTATIVE_BUG]
    result = power.run_bug(bug, paths=(REPRESENTATIVE_PATH,), workers=0, keyword=REPRESENTATIVE_TESTS,
                           timeout_s=240, cwd=REPO)
    assert result.error is None, result
    assert result.tests_run >= 1 and result.caught, result
    assert result.seconds <= REPRESENTATIVE_BUDGET_S * 4, result  # budget 60 s; x4 headroom under load
