"""The draft's rejected alternative (EndTxn carrying the written partitions, a broker-side
session of the last transaction's partitions) is not implemented: ending a transaction needs
no partition list and no state from an earlier transaction."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from conformance.suites.kip98.test_fencing import committed_values
from conformance.suites.kip1289 import wait_for
from reference_impl.protocol.api_keys import ApiKey

END_TXN, TV1_MAX_END_TXN = ApiKey.END_TXN, 4


@pytest.mark.requirement("KIP-TXNRT.ENDTXN.001")
def test_end_txn_without_partitions_commits_at_every_tv1_version(rt):
    """At each EndTxn version the target serves up to v4 (none has a partition list), with a
    fresh InitProducerId before each (a re-initialized producer: no session to rely on), a
    transaction on partition 0 commits and its record becomes read_committed-visible."""
    topic = rt.topic(1)
    txn = rt.txn(topic)
    lo, hi = rt.cc.bootstrap.api_versions()[END_TXN]
    expected: list[str] = []
    for version in range(lo, min(hi, TV1_MAX_END_TXN) + 1):
        txn.init()
        assert txn.add([0])[0] == {0: E.none}
        txn.produce(0, f"v{version}")
        assert txn.end(committed=True, version=version) == E.none, f"EndTxn v{version}"
        expected.append(f"v{version}")
        wait_for(lambda: committed_values(rt.cc, topic, 0) == expected, f"the commit at EndTxn v{version}", 20)
