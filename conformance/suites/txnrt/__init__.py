"""The draft KIP on transaction round trips (seed 002): blocking AddPartitionsToTxn and
pre-registered output partitions.

Capability gate (every test goes through the `rt` fixture of conftest.py): the target must
support the feature `transaction.roundtrip.version` at level 1 (DIV-200201: the draft's
"bump AddPartitionToTxn by one" cannot be a version number, Kafka spent v4/v5 on KIP-890).
No Apache Kafka release has the draft, so on kafka-native and librdkafka's mock every test
reports "not supported by target" with that reason, read from ApiVersions' supported and
finalized features. On the reference, which supports the level but finalizes 0 (Kafka's
behaviour), the fixture raises it with UpdateFeatures for the test and lowers it afterwards.

Wire helpers: a transaction protocol v1 producer on the raw client (AddPartitionsToTxn <= v3,
the client form the draft talks about; EndTxn <= v4 keeps the producer epoch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode as E

from conformance.suites.kip1289 import features, update_features, wait_for  # noqa: F401 - re-exported
from conformance.suites.kip98 import (
    ADD_PARTITIONS_TO_TXN, READ_COMMITTED, end_txn, idem_batch, init_producer_id, produce_v11,
)
from clients.wire import Req, list_offset
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey

FEATURE = "transaction.roundtrip.version"
BLOCKING = 1
DESCRIBE_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS
LATEST = -1


def missing_capability(node: RawClient) -> str | None:
    """Why the target cannot run the draft's tests (None when it finalizes the level)."""
    _, finalized, supported = features(node)
    if int(finalized.get(FEATURE, 0)) >= BLOCKING:
        return None
    lo_hi = supported.get(FEATURE)
    if lo_hi is None or lo_hi[1] < BLOCKING:
        return (f"KIP-TXNRT: feature {FEATURE} is not supported (ApiVersions lists "
                f"{sorted(supported) or 'no supported features'}); the draft is in no Apache Kafka release")
    return f"KIP-TXNRT: {FEATURE} is supported up to {lo_hi[1]} but finalized at {finalized.get(FEATURE, 0)}"


@dataclass
class Tv1Txn:
    """One transactional id driven on the wire with transaction protocol v1."""

    cc: ClusterClient
    tid: str
    topic: str
    pid: int = -1
    epoch: int = -1
    seqs: dict[int, int] = field(default_factory=dict)

    def coordinator(self) -> RawClient:
        return self.cc.coordinator_for(self.tid, key_type=1, wait_s=30)

    def init(self) -> "Tv1Txn":
        _, resp = init_producer_id(self.cc, self.tid)
        assert resp.error_code == E.none, resp
        self.pid, self.epoch, self.seqs = int(resp.producer_id), int(resp.producer_epoch), {}
        return self

    def add(self, partitions: list[int], version: int = 3) -> tuple[dict[int, int], float]:
        """One AddPartitionsToTxn, never retried: ({partition: error}, seconds it took)."""
        r = Req(self.coordinator(), ADD_PARTITIONS_TO_TXN, version)
        topics = (r.part("AddPartitionsToTxnTopic", name=self.topic, partitions=tuple(partitions)),)
        started = time.monotonic()
        resp = r.send(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=topics,
        )
        elapsed = time.monotonic() - started
        results = resp.results_by_topic_v3_and_below
        return {int(p.partition_index): int(p.partition_error_code) for t in results for p in t.results_by_partition}, elapsed

    def produce(self, partition: int, value: str) -> None:
        seq = self.seqs.get(partition, 0)
        batch = idem_batch([value], self.pid, self.epoch, seq, transactional=True)
        resp = produce_v11(self.cc.leader_for(self.topic, partition), self.topic, partition, batch, self.tid)
        assert int(resp.error_code) == E.none, resp
        self.seqs[partition] = seq + 1

    def end(self, committed: bool, version: int = 3) -> int:
        if version == 3:
            return end_txn(self.coordinator(), self.tid, self.pid, self.epoch, committed)
        r = Req(self.coordinator(), 26, version)
        return int(r.send(transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
                          committed=committed).error_code)

    def describe(self) -> Any:
        resp = self.coordinator().request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=(self.tid,))
        return resp.transaction_states[0]

    def described_partitions(self) -> set[tuple[str, int]]:
        return {(t.topic, int(p)) for t in self.describe().topics for p in t.partitions}

    def lso(self, partition: int) -> int:
        leader = self.cc.leader_for(self.topic, partition)
        return int(list_offset(leader, self.topic, partition, LATEST, isolation_level=READ_COMMITTED).offset)
