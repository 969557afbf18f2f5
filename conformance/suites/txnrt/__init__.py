"""The draft KIP on transaction round trips (seed 002): blocking AddPartitionsToTxn and
pre-registered output partitions.

Capability gate (every test goes through the `rt` fixture of conftest.py): the target must
support the feature `transaction.roundtrip.version` at level 1 (DIV-200201: the draft's
"bump AddPartitionToTxn by one" cannot be a version number, Kafka spent v4/v5 on KIP-890).
No Apache Kafka release has the draft, so on kafka-native and librdkafka's mock every test
reports "not supported by target" with that reason, read from ApiVersions' supported and
finalized features. On the reference, which supports the level but finalizes 0 (Kafka's
behaviour), the fixture raises it with UpdateFeatures for the test and lowers it afterwards.

Wire helpers: a transaction protocol v1 producer on clients.txn (AddPartitionsToTxn <= v3,
the client form the draft talks about; EndTxn <= v4 keeps the producer epoch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode as E

from clients.txn import TxnSession, add_partitions_to_txn, end_txn, end_txn_settled
from clients.wire import list_offset, produce
from conformance.suites.kip1289 import features
from conformance.suites.kip98 import READ_COMMITTED, idem_batch
from reference_impl.client.raw_client import RawClient

FEATURE = "transaction.roundtrip.version"
BLOCKING = 1
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
class Tv1Txn(TxnSession):
    """One transactional id driven on the wire with transaction protocol v1 (clients.txn)."""

    topic: str
    seqs: dict[int, int] = field(default_factory=dict)

    def init(self) -> "Tv1Txn":
        resp = self.init_producer_id()
        assert resp.error_code == E.none, resp
        self.seqs = {}
        return self

    def add(self, partitions: list[int], version: int = 3) -> tuple[dict[int, int], float]:
        """One AddPartitionsToTxn, never retried: ({partition: error}, seconds it took)."""
        node = self.coordinator()
        started = time.monotonic()
        _, codes = add_partitions_to_txn(node, self.tid, self.pid, self.epoch, self.topic, partitions, highest=version)
        return codes, time.monotonic() - started

    def produce(self, partition: int, value: str) -> None:
        seq = self.seqs.get(partition, 0)
        batch = idem_batch([value], self.pid, self.epoch, seq, transactional=True)
        resp = produce(self.cc.leader_for(self.topic, partition), self.topic, partition, batch, transactional_id=self.tid)
        assert int(resp.error_code) == E.none, resp
        self.seqs[partition] = seq + 1

    def end(self, committed: bool, version: int = 3) -> int:
        """EndTxn: by default as the suite's other TV1 transactions end (<= v4, retried while
        CONCURRENT_TRANSACTIONS); at an explicit `version` one request at that version or below."""
        if version == 3:
            return int(end_txn_settled(self.coordinator(), self.tid, self.pid, self.epoch, committed)[1].error_code)
        return int(end_txn(self.coordinator(), self.tid, self.pid, self.epoch, committed, highest=version)[1].error_code)

    def described_partitions(self) -> set[tuple[str, int]]:
        return {(t.topic, int(p)) for t in self.describe().topics for p in t.partitions}

    def lso(self, partition: int) -> int:
        leader = self.cc.leader_for(self.topic, partition)
        return int(list_offset(leader, self.topic, partition, LATEST, isolation_level=READ_COMMITTED).offset)
