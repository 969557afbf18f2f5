"""KIP-1289 client API with the reference clients: ShareConsumer.share_group_metadata(),
TransactionalProducer.send_share_acknowledgements_to_transaction(), in the KIP's
read-process-write loop (consume from a share group, produce, stage the acknowledgements,
commit or abort)."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E

from clients import confluent
from conformance.suites.kip1289 import SAFE_DOWNGRADE, UPGRADE, update_features, wait_for
from conformance.suites.kip98.test_fencing import committed_values
from reference_impl.client.share_consumer import ShareConsumer
from reference_impl.client.share_group_metadata import ShareGroupMetadata
from reference_impl.client.transactional_producer import (
    AbortableTxnError, IllegalTxnStateError, ShareAckUnsupportedError, TransactionalProducer,
)

LOCK = {"share.record.lock.duration.ms": "1000", "share.auto.offset.reset": "earliest"}


class Loop:
    """One share consumer (explicit acknowledgement) and one transactional producer."""

    def __init__(self, kip, n: int = 4) -> None:
        self.kip = kip
        self.sp = kip.share_partition(1, LOCK)
        self.out = kip.unique.topic()
        confluent.create_topic(kip.target, self.out)
        self.sp.produce([b"in%d" % i for i in range(n)])
        self.n = n
        bootstrap = kip.target.bootstrap_servers
        self.consumer = ShareConsumer(bootstrap, self.sp.group, "explicit", fetch_max_wait_ms=200)
        self.consumer.subscribe([self.sp.topic])
        self.producer = TransactionalProducer(bootstrap, kip.unique.transactional_id(), transaction_timeout_ms=60_000)
        self.producer.init_transactions()

    def poll_all(self, wait_s: float = 30.0) -> list:
        got: list = []
        deadline = time.monotonic() + wait_s
        while len(got) < self.n and time.monotonic() < deadline:
            got += self.consumer.poll(500)
        assert len(got) == self.n, f"polled {len(got)} of {self.n}"
        return got

    def process(self, records, metadata: ShareGroupMetadata | None = None) -> None:
        self.producer.begin_transaction()
        for r in records:
            self.producer.send(self.out, value=b"out-" + r.value, partition=0)
        acks = self.consumer.transactional_acknowledgements(records)
        self.producer.send_share_acknowledgements_to_transaction(acks, metadata or self.consumer.share_group_metadata())

    def wait_outputs(self) -> None:
        """The outputs become read_committed-visible once the commit's markers are written
        (EndTxn returns before that)."""
        want = [f"out-in{i}" for i in range(self.n)]
        wait_for(lambda: committed_values(self.kip.cc, self.out) == want, "the committed outputs")
        assert committed_values(self.kip.cc, self.out) == want

    def close(self) -> None:
        for c in (self.consumer, self.producer):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - teardown
                pass


@pytest.fixture
def loop(kip):
    lp = Loop(kip)
    try:
        yield lp
    finally:
        lp.close()


@pytest.mark.requirement("KIP-1289.API.001", "KIP-1289.API.004", "KIP-1289.STATE.005")
def test_commit_produces_and_acknowledges_together(loop):
    """Commit: the outputs are read_committed-visible and the inputs acknowledged (SPSO past
    them: no member gets them again)."""
    records = loop.poll_all()
    meta = loop.consumer.share_group_metadata()
    assert (meta.group_id, meta.member_id) == (loop.sp.group, loop.consumer.member_id) and meta.member_epoch > 0
    loop.process(records, meta)
    loop.producer.commit_transaction()
    loop.wait_outputs()
    wait_for(lambda: loop.sp.state()[0] == loop.n, "the inputs acknowledged")


@pytest.mark.requirement("KIP-1289.API.001", "KIP-1289.STATE.005")
def test_abort_produces_nothing_and_redelivers(loop):
    """Abort: no output, and the inputs (back with the member, its lock 1 s) are polled again
    with delivery count 2; the second attempt commits."""
    loop.process(loop.poll_all())
    loop.producer.abort_transaction()
    again = loop.poll_all()
    assert sorted(r.delivery_count for r in again) == [2] * loop.n
    assert committed_values(loop.kip.cc, loop.out) == []
    loop.process(again)
    loop.producer.commit_transaction()
    loop.wait_outputs()


@pytest.mark.requirement("KIP-1289.API.002")
def test_staging_outside_a_transaction_is_illegal(loop):
    records = loop.poll_all()
    acks = loop.consumer.transactional_acknowledgements(records)
    with pytest.raises(IllegalTxnStateError):
        loop.producer.send_share_acknowledgements_to_transaction(acks, loop.consumer.share_group_metadata())


@pytest.mark.requirement("KIP-1289.API.003", "KIP-1289.CASE.008", "KIP-1289.API.004")
def test_broker_refusal_surfaces_at_commit_and_a_retry_succeeds(loop):
    """A stale member epoch: the staging call returns normally, commit raises the abortable
    STALE_MEMBER_EPOCH; abort, and the loop retried with a fresh snapshot commits once."""
    records = loop.poll_all()
    meta = loop.consumer.share_group_metadata()
    stale = ShareGroupMetadata(meta.group_id, meta.member_id, meta.member_epoch - 1)
    loop.process(records, stale)
    with pytest.raises(AbortableTxnError) as excinfo:
        loop.producer.commit_transaction()
    assert excinfo.value.error_code == E.stale_member_epoch
    loop.producer.abort_transaction()
    again = loop.poll_all()
    loop.process(again)
    loop.producer.commit_transaction()
    loop.wait_outputs()


@pytest.mark.requirement("KIP-1289.GATE.004", "KIP-1289.CASE.009", "KIP-1289.API.003")
def test_cluster_without_the_feature_fails_the_staging_call_before_sending(kip):
    """share.version lowered to 1 (no key 93): the staging call raises at once (API.003: the
    throws list's synchronous UnsupportedVersionException, not an error at commit); the
    application aborts and no output is committed."""
    assert update_features(kip.cc.bootstrap, {"share.version": 1}, SAFE_DOWNGRADE).error_code == E.none
    try:
        lp = Loop(kip)
        try:
            records = lp.poll_all()
            lp.producer.begin_transaction()
            lp.producer.send(lp.out, value=b"x", partition=0)
            acks = lp.consumer.transactional_acknowledgements(records)
            with pytest.raises(ShareAckUnsupportedError):
                lp.producer.send_share_acknowledgements_to_transaction(acks, lp.consumer.share_group_metadata())
            lp.producer.abort_transaction()
            assert committed_values(kip.cc, lp.out) == []
        finally:
            lp.close()
    finally:
        assert update_features(kip.cc.bootstrap, {"share.version": 2}, UPGRADE).error_code == E.none
