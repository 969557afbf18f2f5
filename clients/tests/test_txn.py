"""clients.txn against the in-process reference broker (TV2): the settled InitProducerId
retries CONCURRENT_TRANSACTIONS until the fenced transaction is aborted, and a session
sends the epoch EndTxn v5 bumped (KIP-890) on its next request."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode as E

from clients import wire
from clients.txn import TxnSession, add_partitions_ok, init_ok, produce_txn_ok
from reference_impl.client.raw_client import ClusterClient
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.protocol import records
from reference_impl.server.broker_server import ThreadedReferenceCluster


@pytest.fixture(scope="module")
def cc():
    with ThreadedReferenceCluster(brokers=1, config=BrokerConfig(finalized_features={"transaction.version": 2})) as cluster, \
            ClusterClient(cluster.bootstrap_servers) as client:
        yield client


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_init_ok_retries_concurrent_transactions_until_the_open_transaction_is_aborted(cc):
    """A second instance's InitProducerId fences the open transaction: the coordinator
    answers CONCURRENT_TRANSACTIONS while it aborts it, init_ok retries until NONE."""
    tid, topic = _unique("txn"), _unique("topic")
    assert wire.create_topic(cc, topic) == E.none
    node, first, _ = init_ok(cc, tid)
    pid, epoch = int(first.producer_id), int(first.producer_epoch)
    add_partitions_ok(node, tid, pid, epoch, topic, [0])
    batch = records.build_batch([records.NewRecord(value=b"open")], producer_id=pid, producer_epoch=epoch,
                                base_sequence=0, transactional=True)
    _, produced = produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, batch)
    assert produced.error_code == E.none, produced
    _, second, before = init_ok(cc, tid)
    assert E.concurrent_transactions in before, before
    assert int(second.producer_id) == pid and int(second.producer_epoch) > epoch, second


def test_session_sends_the_epoch_end_txn_v5_bumped(cc):
    """Aborting an Empty transaction at EndTxn v5 answers NONE with the epoch + 1; the
    session's next abort carries that epoch, so the coordinator bumps it again (the same
    abort retried with the old epoch is answered with the same epoch + 1)."""
    session = TxnSession(cc, _unique("txn"))
    assert session.init_producer_id().error_code == E.none
    epoch = session.epoch
    assert session.end_txn(False, highest=5, lowest=5).error_code == E.none
    assert session.epoch == epoch + 1
    assert session.end_txn(False, highest=5, lowest=5).error_code == E.none
    assert session.epoch == epoch + 2
