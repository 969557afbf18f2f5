"""The franz-go adapter: which kgo tests need a broker, and how they are pointed at one.

kgo's tests read their broker from the environment (helpers_test.go): KGO_SEEDS (bootstrap),
KGO_TEST_RF (replication factor of the topics they create), KGO_TEST_RECORDS (records per
ETL test, default 500000), KGO_LOG_LEVEL (client logs; "none" here unless the caller sets
it). They probe the broker's ApiVersions themselves and skip with their own reason what it
lacks (KIP-848, share groups, static membership).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from client_suites.franz_go.build import FRANZ_GO_VERSION, ensure_binary, go
from client_suites.gotest import run_one
from client_suites.runner import ClientSuite, SuiteTarget, TestOutcome

# The tests of kgo v1.22.3 that talk to a broker: every Test function that, directly or through
# a helper, calls newTestClient, testClientOpts, getSeedBrokers or tmpTopic (read from the
# module's *_test.go). The rest of the binary's 160 tests are unit tests of the client alone;
# TestSCRAMAuth*, TestOAuthAuth need brokers of their own (KGO_TEST_SCRAM_SEEDS, ...).
INTEGRATION_TESTS = (
    "TestPing", "TestIssue1034", "TestUnknownGroupOffsetFetchPinned", "TestShareGroup",
    "TestClient_Produce", "TestClient_ProduceLargeMessages", "TestIssue769", "TestIssue831",
    "TestIssueProduceBrokerTooOldFailsRecords", "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
    "TestConsumeTopicRetrieval", "TestConsumeTopicRetrieval_Many", "TestConsumeRegex",
    "TestConsumeRegexShareSkipsInternal", "Test848RegexBrokerResolves", "TestAddRemovePartitions",
    "TestConsumeMaxDecompressBatchBytes", "TestDirectPartitionPurge", "TestGroupSimple", "TestIssue325",
    "TestIssue337", "TestIssue434", "TestIssue523", "TestIssue648", "TestIssue810", "TestIssue865",
    "TestIssueFetchLargerThanBrokerMaxReadBytes", "TestPauseIssue489", "TestPauseIssueOct2023", "TestPooling",
    "TestGroupETL", "TestTxnEtl",
    "TestShareGroupETL", "TestShareGroupAckOnClose", "TestShareGroupOffsetsAdmin",
)
MAX_RF = 3  # kgo's own default; more replicas than brokers fails CreateTopics
# kgo learns what the broker supports (allow848, allowShare, ...) when a test first calls adm()
# (helpers_test.go). TestGroupSimple/848 checks allow848 before its own first adm() call
# (consumer_test.go), so alone in a process it would skip with "broker does not support
# KIP-848" whatever the broker: the serial TestClient_Produce runs first in its process, as
# in a whole-binary run, where serial tests run before the parallel ones resume.
COMPANIONS = {"TestGroupSimple": "TestClient_Produce"}
# kgo's helpers log their cleanup and timing (helpers_test.go): never the reason a test failed.
CHATTER = re.compile(r"^(FAILED TESTING -- NOT DELETING|deleting (topic|group)|\S+ completed in )")


class FranzGo(ClientSuite):
    name = "franz-go"
    version = FRANZ_GO_VERSION

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir  # raw and converted test streams, one pair per test

    def build(self) -> Path:
        return ensure_binary()

    def tests(self) -> tuple[str, ...]:
        return INTEGRATION_TESTS

    def run_test(self, artefact: Path, test: str, target: SuiteTarget, records: int,
                 deadline_s: float) -> list[TestOutcome]:
        return run_one(go(), artefact, test, environment(target, records), deadline_s, self.workdir, CHATTER,
                       COMPANIONS.get(test))


def environment(target: SuiteTarget, records: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGO_") or k == "KGO_LOG_LEVEL"}
    env.setdefault("KGO_LOG_LEVEL", "none")
    return {**env, "KGO_SEEDS": target.bootstrap, "KGO_TEST_RF": str(min(target.nodes, MAX_RF)),
            "KGO_TEST_RECORDS": str(records)}
