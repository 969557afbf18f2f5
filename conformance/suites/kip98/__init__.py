"""KIP-98 suite: idempotence, commit/abort visibility, last stable offset.

The transaction requests themselves are `clients.txn`'s. Transactions driven on the wire
here use protocol v1 (AddPartitionsToTxn <= v3, EndTxn <= v4, Produce <= v11), which every
broker that has transactions accepts; TV2 is exercised through the reference client. This
package keeps the suite's record builders, log readers and capability gate.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from clients import confluent
from clients.wire import fetch, list_offset
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import records
from reference_impl.protocol.api_keys import ApiKey

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN
LATEST = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TS = 1_700_000_000_000


def values(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + n)]


def plain_batch(vals: list[str]) -> bytes:
    return records.build_batch([records.NewRecord(value=v.encode(), timestamp=TS) for v in vals])


def idem_batch(vals: list[str], producer_id: int, epoch: int, seq: int, transactional: bool = False) -> bytes:
    return records.build_batch(
        [records.NewRecord(value=v.encode(), timestamp=TS) for v in vals],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )


def log_end(leader: RawClient, topic: str, partition: int = 0, isolation_level: int = READ_UNCOMMITTED) -> int:
    """ListOffsets latest: the high watermark, or the LSO at read_committed."""
    p = list_offset(leader, topic, partition, LATEST, isolation_level=isolation_level)
    if int(p.error_code) != 0:
        raise RuntimeError(f"ListOffsets {topic}-{partition} failed with error {int(p.error_code)}")
    return int(p.offset)


def wait_stable(leader: RawClient, topic: str, partition: int = 0, at_least: int = 0, timeout_s: float = 20.0) -> tuple[int, int]:
    """Wait until the LSO (ListOffsets latest, read_committed) equals the high watermark and
    the high watermark is >= at_least: transaction markers are written asynchronously
    after EndTxn. Returns (high watermark, LSO) as last seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        hw = log_end(leader, topic, partition)
        lso = log_end(leader, topic, partition, READ_COMMITTED)
        if (hw == lso and hw >= at_least) or time.monotonic() > deadline:
            return hw, lso
        time.sleep(0.05)


def require_transactions(capabilities: Any) -> None:
    for key, what in ((INIT_PRODUCER_ID, "InitProducerId"), (ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn"), (END_TXN, "EndTxn")):
        if not capabilities.supports_api(key):
            raise NotSupportedByTarget(f"{what} is not advertised: no transactions")


def batch_summary(data: bytes | None) -> list[dict[str, Any]]:
    """Each fetched batch: offsets, flags, and (for control batches) the marker type."""
    out = []
    for b in records.decode_batches(data):
        h = b.header
        item: dict[str, Any] = {
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "magic": h.magic,
            "transactional": h.is_transactional,
            "control": h.is_control,
            "producer_id": h.producer_id,
            "base_sequence": h.base_sequence,
        }
        if h.is_control and b.records:
            ctype, _coordinator_epoch = records.parse_control_record(b.records[0])
            item["marker"] = ctype.name
            item["marker_key_version"] = struct.unpack_from(">h", b.records[0].key, 0)[0]
        else:
            item["values"] = [None if r.value is None else r.value.decode() for r in b.records]
        out.append(item)
    return out


def fetch_all(cc: ClusterClient, leader: RawClient, topic: str, partition: int = 0, isolation_level: int = READ_UNCOMMITTED) -> dict[str, Any]:
    """Fetch from offset 0 until the end (HW, or LSO at read_committed), following batch
    ends as a client does (some brokers answer one batch per fetch). Returns the batches'
    bytes concatenated, the aborted transactions seen, and the last answer's offsets."""
    offset, chunks, aborted, last, bad_crc = 0, [], [], None, []
    for _ in range(200):
        part = fetch(cc, leader, topic, partition, offset, isolation_level=isolation_level)
        if int(part.error_code) != 0:
            raise RuntimeError(f"Fetch {topic}-{partition}@{offset} failed with error {int(part.error_code)}")
        last = part
        for a in getattr(part, "aborted_transactions", None) or ():
            item = (int(a.producer_id), int(a.first_offset))
            if item not in aborted:
                aborted.append(item)
        raw = part.records or b""
        batches, _ = records.split_batches(raw)
        end = offset
        for b in batches:
            h = records.parse_batch_header(b)
            if h.last_offset >= offset:
                if not records.check_crc(b):
                    # Kept visible to checks, repaired so that decoding (which verifies) goes on.
                    bad_crc.append(h.base_offset)
                    b = records.with_crc(bytes(b), records.compute_crc(b))
                chunks.append(bytes(b))
            end = max(end, h.next_offset)
        if end == offset:
            break
        offset = end
    assert last is not None
    return {
        "records": b"".join(chunks),
        "aborted": aborted,
        "aborted_is_null": getattr(last, "aborted_transactions", None) is None,
        "high_watermark": int(last.high_watermark),
        "last_stable_offset": int(getattr(last, "last_stable_offset", -1)),
        "next_offset": offset,
        "bad_crc_batches": bad_crc,
    }


def create_ready_topic(target: Any, cc: ClusterClient, topic: str, partitions: int = 1, timeout_s: float = 20.0,
                       replication: int = -1) -> None:
    """Create the topic (`replication` -1: the broker's default) and
    wait until every partition's leader answers ListOffsets (a freshly created partition may
    still refuse requests with NOT_LEADER_OR_FOLLOWER)."""
    confluent.create_topic(target, topic, partitions=partitions, replication=replication)
    deadline = time.monotonic() + timeout_s
    for p in range(partitions):
        while True:
            try:
                code = int(list_offset(cc.leader_for(topic, p), topic, p, LATEST).error_code)
            except LookupError:
                code = -1
            if code == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{p} not ready after {timeout_s}s (ListOffsets error {code})")
            time.sleep(0.1)
