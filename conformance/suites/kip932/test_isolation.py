"""KIP-932 transactional records in share groups: the isolation level is the group config
share.isolation.level (KIP text: group.share.isolation.level). read_uncommitted (the
default) delivers aborted records; read_committed never delivers them and stops at the
last stable offset while a transaction is open.

Transactions come from the reference transactional producer (raw protocol, TV1/TV2 as
the target finalizes); plain records from a raw Produce.
"""

from __future__ import annotations

import pytest

from clients import wire
from clients.share import (
    ACCEPT, E, SharePartitionUnderTest, ShareSession, ack_codes, alter_group_configs, delivery_counts, partition_data,
)
from targets.target import NotSupportedByTarget
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.protocol import records as r
from reference_impl.protocol.api_keys import ApiKey


@pytest.fixture
def sp(target, unique):
    with wire.cluster_client(target) as cc:
        yield SharePartitionUnderTest(target, cc, unique.topic(), unique.group())


def producer(sp: SharePartitionUnderTest, unique) -> TransactionalProducer:
    caps = sp.target.capabilities()
    if not (caps.supports_api(ApiKey.INIT_PRODUCER_ID) and caps.supports_api(ApiKey.ADD_PARTITIONS_TO_TXN) and caps.supports_api(ApiKey.END_TXN)):
        raise NotSupportedByTarget("transactions (InitProducerId / AddPartitionsToTxn / EndTxn) are not advertised")
    p = TransactionalProducer(sp.target.bootstrap_servers, unique.transactional_id(), transaction_timeout_ms=20000, security=sp.target.raw_security())
    p.init_transactions()
    return p


def transaction(p: TransactionalProducer, sp: SharePartitionUnderTest, values: list[bytes]) -> list[int]:
    """Begin, send `values` to partition 0 and flush; the offsets they were written at."""
    p.begin_transaction()
    for v in values:
        p.send(sp.topic, 0, v)
    p.flush()
    return [b.base_offset + i for b in p.produced if b.partition == 0 for i in range(b.record_count)][-len(values):]


def delivered(resp, tid) -> dict[int, bytes]:
    """offset -> value of the data records this response acquired."""
    pd = partition_data(resp, tid)
    mine = delivery_counts(resp)
    if pd is None or not pd.records:
        return {}
    return {rec.offset: rec.value for rec in r.iter_records(pd.records) if rec.offset in mine}


def drain(s: ShareSession, sp: SharePartitionUnderTest, want: int, wait_s: float = 8.0) -> tuple[dict[int, bytes], set[int]]:
    """Fetch (accepting as it goes) until `want` data records came; (records, all acquired offsets)."""
    import time

    got: dict[int, bytes] = {}
    offsets: set[int] = set()
    acks = None
    deadline = time.monotonic() + wait_s
    while len(got) < want and time.monotonic() < deadline:
        resp = s.fetch([sp.key()], acks=acks, max_wait_ms=300)
        assert resp.error_code == E.none, resp
        got.update(delivered(resp, sp.tid))
        counts = delivery_counts(resp)
        offsets |= set(counts)
        acks = {sp.key(): [(o, o, [ACCEPT]) for o in sorted(counts)]} if counts else None
    if acks:
        assert ack_codes(s.ack(acks)) == {0: 0}
    return got, offsets


@pytest.mark.requirement("KIP-932.TXN.001")
def test_isolation_level_is_a_group_config(sp):
    """share.isolation.level accepts read_committed and read_uncommitted and refuses
    anything else with INVALID_CONFIG."""
    sp.open()
    assert alter_group_configs(sp.cc, sp.group, {"share.isolation.level": "read_committed"})[0] == E.none
    assert alter_group_configs(sp.cc, sp.group, {"share.isolation.level": "read_uncommitted"})[0] == E.none
    code, message = alter_group_configs(sp.cc, sp.group, {"share.isolation.level": "serializable"})
    assert code == E.invalid_config, (code, message)


@pytest.mark.requirement("KIP-932.TXN.002", "KIP-932.TXN.001")
def test_read_uncommitted_delivers_aborted_records(sp, unique):
    """Default isolation (read_uncommitted): an aborted transaction's records are delivered,
    and so is the plain record after it."""
    sp.open()
    s = sp.primed_member()
    with producer(sp, unique) as p:
        aborted = transaction(p, sp, [b"aborted-1", b"aborted-2"])
        p.abort_transaction()
    plain = sp.produce([b"plain"])
    got, _ = drain(s, sp, 3)
    assert got == {aborted[0]: b"aborted-1", aborted[1]: b"aborted-2", plain: b"plain"}


@pytest.mark.requirement("KIP-932.TXN.003", "KIP-932.TXN.004")
def test_read_committed_stops_at_the_lso_and_skips_aborted(sp, unique, record_property):
    """read_committed: a plain record before an open transaction is delivered; nothing at or
    past the transaction is, not even plain records written after it, until it ends; the
    aborted records are never acquired; the committed ones and later plain ones are."""
    sp.open({"share.isolation.level": "read_committed"})
    s = sp.primed_member()
    first = sp.produce([b"plain-1"])
    with producer(sp, unique) as p:
        aborted = transaction(p, sp, [b"aborted-1", b"aborted-2"])
        after_open = sp.produce([b"plain-2"])
        got, _ = drain(s, sp, 1)
        assert got == {first: b"plain-1"}
        blocked, blocked_offsets = drain(s, sp, 1, wait_s=1.5)
        assert blocked == {} and blocked_offsets == set(), f"delivered past the LSO: {blocked_offsets}"
        p.abort_transaction()
        committed = transaction(p, sp, [b"committed-1", b"committed-2"])
        p.commit_transaction()
    last = sp.produce([b"plain-3"])
    got, offsets = drain(s, sp, 4)
    record_property("acquired_offsets_after_abort", sorted(offsets))
    assert got == {after_open: b"plain-2", committed[0]: b"committed-1", committed[1]: b"committed-2", last: b"plain-3"}
    assert not offsets & set(aborted), f"aborted offsets {aborted} acquired: {sorted(offsets)}"
