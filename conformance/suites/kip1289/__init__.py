"""KIP-1289 suite: share-group acknowledgements inside producer transactions.

Capability gate (every test goes through the `kip` fixture of conftest.py): the target must
advertise api key 93 (TxnShareAcknowledge) and finalize share.version >= 2 and
transaction.version >= 2. No Apache Kafka release has KIP-1289, so on kafka-native and
librdkafka's mock every test reports "not supported by target" with that reason. On the
reference, which supports share.version 2 but finalizes 1 by default, the fixture raises
share.version to 2 with UpdateFeatures for the test and lowers it again afterwards; it never
changes the features of any other target.

Wire helpers in the style of clients.wire: one request, the answer as decoded.
Transactions use TV2 (EndTxn v5 bumps the epoch), which KIP-1289 requires, through clients.txn.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as E

from clients.share import heartbeat, nested
from clients.txn import TxnSession
from clients.wire import ms
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads
from reference_impl.protocol.api_keys import ApiKey

TXN_SHARE_ACK, UPDATE_FEATURES, WRITE_TXN_MARKERS = ApiKey.TXN_SHARE_ACKNOWLEDGE, ApiKey.UPDATE_FEATURES, ApiKey.WRITE_TXN_MARKERS
API_VERSIONS = ApiKey.API_VERSIONS
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
SHARE_STATE_TOPIC = "__share_group_state"

# (topic id, partition) -> [(first, last, [types])]
Acks = dict[tuple[uuid.UUID, int], list[tuple[int, int, list[int]]]]


# -- capability -------------------------------------------------------------------------------


def features(node: RawClient) -> tuple[dict[int, tuple[int, int]], dict[str, int], dict[str, tuple[int, int]]]:
    """(api ranges, finalized levels, supported ranges) from a fresh ApiVersions v3+."""
    versions = node.api_versions()
    version = node.negotiate(API_VERSIONS, 4)
    if version is None or version < 3:
        return versions, {}, {}
    resp = node.api_versions_response(version)
    finalized = {f.name: int(f.max_version_level) for f in (resp.finalized_features or ())}
    supported = {f.name: (int(f.min_version), int(f.max_version)) for f in (resp.supported_features or ())}
    return versions, finalized, supported


def missing_capability(node: RawClient, probe: bool = True) -> str | None:
    """Why the target cannot run KIP-1289 tests, or None.

    ApiVersions first (key 93, share.version >= 2, transaction.version >= 2). That is not
    enough on real Kafka: Kafka 4.4 finalizes share.version 2 for KIP-1191 (dead-letter
    queues) and may advertise key 93 for another RPC. So `probe` then sends one
    TxnShareAcknowledge v0 with a null transactional id on a separate connection: only a
    broker that parses it as KIP-1289's request answers a decodable response (INVALID_REQUEST
    or UNSUPPORTED_VERSION); any other broker closes the connection or answers something
    that does not parse."""
    versions, finalized, _ = features(node)
    problems = []
    if TXN_SHARE_ACK not in versions:
        problems.append("api key 93 (TxnShareAcknowledge) is not advertised")
    if finalized.get("share.version", 0) < 2:
        problems.append(f"finalized share.version={finalized.get('share.version', 0)} < 2")
    if finalized.get("transaction.version", 0) < 2:
        problems.append(f"finalized transaction.version={finalized.get('transaction.version', 0)} < 2")
    if not problems and probe and not _speaks_txn_share_ack(node):
        problems.append("api key 93 is advertised but is not TxnShareAcknowledge (no KIP-1289 answer to a probe; "
                        "share.version 2 is KIP-1191's level in Apache Kafka)")
    return "KIP-1289: " + "; ".join(problems) if problems else None


def _speaks_txn_share_ack(node: RawClient) -> bool:
    cls = framing.request_schema(TXN_SHARE_ACK, 0)
    body = payloads.build(cls, transactional_id=None, group_id="", producer_id=-1, producer_epoch=-1,
                          member_id="", member_epoch=-1, topics=())
    try:
        with RawClient(node.host, node.port, "kipcheck-kip1289-probe", 10.0, security=node.security) as probe:
            resp = probe.send(body, timeout=10.0)
    except Exception:  # noqa: BLE001 - closed, timed out or unparseable: not KIP-1289
        return False
    return int(resp.error_code) in (E.invalid_request, E.unsupported_version)


def update_features(node: RawClient, levels: dict[str, int], upgrade_type: int = UPGRADE,
                    validate_only: bool = False) -> Any:
    version = node.negotiate(UPDATE_FEATURES, 2)
    if version is None:
        raise NotSupportedByTarget("the target has no UpdateFeatures (api key 57)")
    updates = tuple(
        nested(UPDATE_FEATURES, version, "FeatureUpdateKey", feature=name, max_version_level=level,
               upgrade_type=upgrade_type, allow_downgrade=upgrade_type != UPGRADE)
        for name, level in levels.items()
    )
    return node.request(UPDATE_FEATURES, version, timeout=ms(30_000), feature_updates=updates, validate_only=validate_only)


def finalized_level(node: RawClient, name: str) -> int:
    return features(node)[1].get(name, 0)


# -- scenario pieces ----------------------------------------------------------------------------


class Txn(TxnSession):
    """A TV2 transactional producer driven on the wire: InitProducerId and EndTxn at v5
    exactly; EndTxn's bumped epoch becomes current (KIP-890)."""

    def init(self, wait_s: float = 30.0) -> "Txn":
        resp = self.init_producer_id(highest=5, lowest=5, wait_s=wait_s)
        assert resp.error_code == E.none, resp
        return self

    def end(self, committed: bool, wait_s: float = 20.0) -> Any:
        return self.end_txn(committed, highest=5, lowest=5, wait_s=wait_s)


def stage(node: RawClient, txn: Txn, group: str, member: str, member_epoch: int, acks: Acks, *,
          producer_epoch: int | None = None, transactional_id: str | None = "", producer_id: int | None = None) -> Any:
    """One TxnShareAcknowledge, exactly as answered."""
    cls = framing.request_schema(TXN_SHARE_ACK, 0)
    topics: dict[uuid.UUID, list[Any]] = {}
    for (tid, p), batches in acks.items():
        topics.setdefault(tid, []).append(payloads.build(
            payloads.nested(cls, "TxnShareAcknowledgePartition"), partition_index=p,
            acknowledgement_batches=tuple(
                payloads.build(payloads.nested(cls, "TxnShareAcknowledgeBatch"), first_offset=f, last_offset=l,
                               acknowledge_types=tuple(types))
                for f, l, types in batches
            ),
        ))
    body = payloads.build(
        cls, transactional_id=txn.tid if transactional_id == "" else transactional_id, group_id=group,
        producer_id=txn.pid if producer_id is None else producer_id,
        producer_epoch=txn.epoch if producer_epoch is None else producer_epoch,
        member_id=member, member_epoch=member_epoch,
        topics=tuple(payloads.build(payloads.nested(cls, "TxnShareAcknowledgeTopic"), topic_id=t, partitions=tuple(ps))
                     for t, ps in topics.items()),
    )
    return node.send(body)


def partition_codes(resp: Any) -> dict[tuple[uuid.UUID, int], int]:
    return {(t.topic_id, int(p.partition_index)): int(p.error_code) for t in resp.responses for p in t.partitions}


def member_epoch(cc: ClusterClient, group: str, member: str, last_epoch: int) -> int:
    """The member's current epoch, from one heartbeat at its last known epoch."""
    resp = heartbeat(cc.coordinator_for(group, 0, wait_s=15), group, member, last_epoch)
    assert resp.error_code == E.none, resp
    return int(resp.member_epoch)


def wait_for(predicate, what: str, wait_s: float = 15.0, every_s: float = 0.2) -> Any:
    """Poll until `predicate()` is truthy (returns it); AssertionError after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {wait_s} s waiting for {what}")
        time.sleep(every_s)


def txn_pending_count(target: Any) -> int | None:
    """The reference's TxnPendingRecordsCount (KIP-1289 metric), read on its event loop;
    None on other targets."""
    threaded = getattr(target, "cluster", None) if target.kind == "reference" else None
    if threaded is None:
        return None

    async def read() -> int:
        return threaded.cluster.state.share_partitions.txn_pending_count()

    return threaded.call(read(), timeout=10)


def inject_marker(node: RawClient, producer_id: int, producer_epoch: int, committed: bool) -> Any:
    """A WriteTxnMarkers naming no partition, as a coordinator's retry or a stray marker reaching
    a broker: KIP-1289's hook offers it to the broker's share-partitions."""
    version = node.negotiate(WRITE_TXN_MARKERS, 2)
    if version is None:
        raise NotSupportedByTarget("the target has no WriteTxnMarkers")
    marker = nested(WRITE_TXN_MARKERS, version, "WritableTxnMarker", producer_id=producer_id,
                    producer_epoch=producer_epoch, transaction_result=committed, topics=(), coordinator_epoch=0,
                    transaction_version=2)
    return node.request(WRITE_TXN_MARKERS, version, markers=(marker,))


def scenario(kip, n: int = 10, configs: dict[str, str] | None = None, partitions: int = 1,
             replication: int | None = None):
    """(share-partition, member session, its epoch, first offset, txn): n records acquired."""
    sp = kip.share_partition(partitions, configs, replication)
    m = sp.primed_member()
    base = sp.produce([b"v%d" % i for i in range(n)])
    assert m.fetch_until([sp.key()], n) == {o: 1 for o in range(base, base + n)}
    epoch = member_epoch(kip.cc, sp.group, m.member, sp.member_epochs[m.member])
    return sp, m, epoch, base, kip.txn()


def staged_ok(resp) -> bool:
    return resp.error_code == E.none and all(c == E.none for c in partition_codes(resp).values())
