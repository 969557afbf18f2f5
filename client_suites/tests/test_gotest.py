"""Reading Go test event streams into outcomes, and judging them against the deviation
register. The streams in streams/ were recorded (2026-12-05, franz-go v1.22.3's kgo.test
against `kipcheck target up reference:nodes=3`, then `go tool test2json -t`): a pass with
KIP-848 subtests skipped by the client, a refused connection, a failure followed by kgo's
cleanup logs, Go's own -test.timeout, and a panicking test of a throwaway module (goroutine
dumps trimmed)."""

from pathlib import Path

import pytest

from client_suites.franz_go.suite import CHATTER
from client_suites.gotest import parse_events
from client_suites.runner import ClientSuite, SuiteBuildError, SuiteTarget, TestOutcome, judge, run_suite
from registers.catalog import get_catalog
from registers.deviations import parse_deviations

STREAMS = Path(__file__).with_name("streams")
REF3 = SuiteTarget("reference:nodes=3", "reference", None, "127.0.0.1:9092", 3)


def outcomes(name: str, killed: bool = False) -> dict[str, TestOutcome]:
    with open(STREAMS / name, encoding="utf-8") as fh:
        return {o.name: o for o in parse_events(fh, killed=killed, chatter=CHATTER)}


def test_pass_and_skip_by_the_client_with_its_own_reason():
    got = outcomes("txn_etl_pass_skip.json")
    assert got["TestTxnEtl"].outcome == "pass" and got["TestTxnEtl"].elapsed_s > 1
    assert got["TestTxnEtl/range"].outcome == "pass"
    skip = got["TestTxnEtl/range/848"]
    assert skip.outcome == "skip"
    assert skip.reason == "broker does not support KIP-848 (requires ConsumerGroupHeartbeat, key 68)"


def test_fail_keeps_the_clients_message_and_output_tail():
    (ping,) = outcomes("ping_fail.json").values()
    assert ping.outcome == "fail" and not ping.timed_out
    assert ping.reason == "unable to ping: unable to dial: dial tcp 127.0.0.1:1: connect: connection refused"
    assert "client_test.go:254" in ping.output_tail


def test_the_reason_is_the_clients_complaint_not_its_cleanup_log():
    (regex,) = outcomes("regex_848_fail.json").values()
    assert regex.outcome == "fail" and regex.reason == "__consumer_offsets is not assigned"
    assert "NOT DELETING TOPIC" in regex.output_tail


def test_go_timeout_fails_every_running_test_with_reason_deadline():
    got = outcomes("txn_etl_timeout.json")
    running = [o for o in got.values() if o.reason == "deadline"]
    assert {o.name for o in running} >= {"TestTxnEtl", "TestTxnEtl/cooperative-sticky/static"}
    assert all(o.outcome == "fail" and o.timed_out for o in running)
    assert got["TestTxnEtl/range/848"].outcome == "skip"  # ended before the timeout: kept as it ended


def test_killed_binary_is_a_deadline_even_without_gos_panic():
    lines = (STREAMS / "txn_etl_pass_skip.json").read_text().splitlines()
    cut = [ln for ln in lines if '"Action":"pass"' not in ln]  # as if killed before anything passed
    got = {o.name: o for o in parse_events(cut, killed=True)}
    assert got["TestTxnEtl/range"].reason == "deadline" and got["TestTxnEtl/range"].timed_out
    assert {o.reason for o in parse_events(cut, killed=False) if o.outcome == "fail"} == {
        "the test binary exited before the test ended"}


def test_a_panic_fails_the_test_and_its_neighbours_with_the_panic_line():
    got = outcomes("panic.json")
    assert got["TestPanics"].outcome == "fail"
    assert got["TestPanics"].reason.startswith("panic: assignment to entry in nil map")
    assert got["TestSlowNeighbour"].outcome == "fail" and not got["TestSlowNeighbour"].timed_out


def test_torn_and_foreign_lines_are_ignored():
    assert parse_events(["not json", "[1]", '{"Action":"output","Output":"PASS\\n"}', '{"Action":"run"']) == []


DEV = {"id": "DEV-990", "target": "reference", "test": "franz-go/TestTxnEtl", "requirement": "CLIENT.FRANZ-GO",
       "observed": "x", "evidence": "y"}


@pytest.mark.parametrize("outcome, entry, verdict, reason", [
    ("fail", DEV, "fail", "expected failure (xfail): registered deviation DEV-990 (CLIENT.FRANZ-GO): x"),
    ("pass", DEV, "fail", "[XPASS(strict)] registered deviation DEV-990 (CLIENT.FRANZ-GO): x"),
    ("pass", {**DEV, "flaky": "1 of 3"}, "pass", ""),
    ("fail", {**DEV, "signature": "OUT_OF_ORDER"}, "fail", "boom"),  # another failure stays a failure
    ("fail", {**DEV, "target": "kafka-native"}, "fail", "boom"),
    ("skip", DEV, "skipped", "skipped by franz-go: boom"),
])
def test_judging_against_the_deviation_register(outcome, entry, verdict, reason):
    (dev,) = parse_deviations({"deviations": [entry]})
    got = judge("franz-go", TestOutcome("TestTxnEtl/range", outcome, "" if outcome == "pass" else "boom", 1.0),
                REF3, [dev])
    assert got == (verdict, reason)


def test_client_suite_entries_may_name_a_client_requirement_id():
    parse_deviations({"deviations": [DEV]}, catalog=get_catalog())
    with pytest.raises(ValueError, match="not in the catalog"):
        parse_deviations({"deviations": [{**DEV, "test": "TestTxnEtl"}]}, catalog=get_catalog())


class _Unbuildable(ClientSuite):
    name, version = "broken", "0"

    def build(self) -> Path:
        raise SuiteBuildError("franz-go suite: go test -c failed:\nmissing go.sum entry")

    def tests(self) -> tuple[str, ...]:
        return ("TestPing",)

    def run_test(self, artefact, test, target, records, deadline_s):  # pragma: no cover - never reached
        raise AssertionError("a suite that did not build cannot run")


def test_build_failure_is_one_error_row():
    (row,) = run_suite(_Unbuildable(), REF3, ["TestPing"], 10, 60.0, deviations=[])
    assert row["verdict"] == "error" and row["nodeid"] == "broken/(build)"
    assert row["reason"] == "franz-go suite: go test -c failed:" and "go.sum" in row["output_tail"]


class _Scripted(ClientSuite):
    """Outcomes by test name: what a target that dies after TestA would give."""
    name, version = "scripted", "0"

    def __init__(self, outcomes: dict[str, str]) -> None:
        self.outcomes = outcomes

    def build(self) -> Path:
        return Path("/nonexistent")

    def tests(self) -> tuple[str, ...]:
        return tuple(self.outcomes)

    def run_test(self, artefact, test, target, records, deadline_s):
        return [TestOutcome(test, self.outcomes[test], "broker closed the connection", 0.1)]


def test_tests_after_the_target_stopped_answering_are_not_run_rows():
    suite = _Scripted({"TestA": "pass", "TestB": "fail", "TestC": "pass", "TestD": "pass"})
    probes = []
    rows = list(run_suite(suite, REF3, suite.tests(), 10, 60.0, deviations=[],
                          down=lambda: probes.append(1) or "ConnectionRefusedError: refused"))
    assert [(r["test"], r["verdict"]) for r in rows] == [
        ("TestA", "pass"), ("TestB", "fail"), ("TestC", "not_run"), ("TestD", "not_run")]
    assert len(probes) == 1, "the target is asked only after a failure"
    assert rows[2]["reason"].startswith("not run: target down") and "after TestB" in rows[2]["reason"]


def test_a_failure_on_a_target_that_still_answers_runs_the_rest():
    suite = _Scripted({"TestA": "fail", "TestB": "pass"})
    rows = list(run_suite(suite, REF3, suite.tests(), 10, 60.0, deviations=[], down=lambda: None))
    assert [r["verdict"] for r in rows] == ["fail", "pass"]


def test_a_whole_suite_entry_excuses_only_its_signature_on_every_test():
    (dev,) = parse_deviations({"deviations": [{
        "id": "DEV-899", "target": "reference", "test": "franz-go", "requirement": "CLIENT.FRANZ-GO",
        "signature": "did not contain enough data", "observed": "o", "evidence": "e"}]}, "t", get_catalog())
    unreadable = TestOutcome("TestTxnEtl/range", "fail", "unable to read ApiVersions: did not contain enough data", 1.0)
    other = TestOutcome("TestPing", "fail", "unable to ping: timeout", 1.0)
    assert judge("franz-go", unreadable, REF3, [dev])[1].startswith("expected failure (xfail): registered deviation DEV-899")
    assert judge("franz-go", other, REF3, [dev]) == ("fail", "unable to ping: timeout")
    with pytest.raises(ValueError, match="whole-suite entry needs a signature"):
        parse_deviations({"deviations": [{"id": "DEV-898", "target": "reference", "test": "franz-go",
                                          "requirement": "CLIENT.FRANZ-GO", "observed": "o", "evidence": "e"}]},
                         "t", get_catalog())
