"""A simple assign-based consumer over the raw protocol client.

Fetch with `isolation_level` read_uncommitted (0) or read_committed (1). At read_committed
the broker only returns data below the last stable offset (LSO) and lists, per partition,
the aborted transactions (producer id, first offset) overlapping the fetched range; the
client must drop the batches of aborted transactions itself. As Kafka's Java consumer does
(`CompletedFetch`): aborted transactions are taken in first-offset order; a transactional
batch whose producer has an aborted transaction starting at or before the batch's last
offset is skipped; that producer's ABORT marker ends the skipping. Control batches
(transaction markers) are never returned, at either isolation level, but the position
moves past them.
"""

from __future__ import annotations

import datetime
import heapq
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from reference_impl.client.partition_metadata import PartitionMetadata
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol import framing, payloads, records
from reference_impl.protocol.api_keys import ApiKey

FETCH, LIST_OFFSETS = ApiKey.FETCH, ApiKey.LIST_OFFSETS
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
EARLIEST, LATEST = -2, -1

TopicPartition = tuple[str, int]


def parse_isolation_level(level: str | int) -> int:
    if isinstance(level, int):
        if level not in (0, 1):
            raise ValueError(f"isolation level must be 0 or 1, not {level}")
        return level
    name = level.strip().lower().replace("-", "_")
    if name == "read_committed":
        return READ_COMMITTED
    if name == "read_uncommitted":
        return READ_UNCOMMITTED
    raise ValueError(f"unknown isolation level {level!r}")


@dataclass(frozen=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    transactional: bool


@dataclass(frozen=True)
class FetchInfo:
    """What the last fetch of a partition reported (for checks)."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...]  # (producer id, first offset)
    skipped_aborted_batches: int
    skipped_control_batches: int


class ConsumerError(RuntimeError):
    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class Consumer:
    """Assign partitions, poll records. No group membership, no committed offsets."""

    def __init__(
        self,
        bootstrap: str,
        isolation_level: str | int = "read_committed",
        *,
        client_id: str = "kipcheck-consumer",
        max_wait_ms: int = 200,
        max_partition_bytes: int = 1 << 20,
        max_bytes: int = 4 << 20,
        request_timeout_s: float = 30.0,
        history_hook: Callable[[dict[str, Any]], None] | None = None,
        security: Any = None,
    ) -> None:
        self.isolation_level = parse_isolation_level(isolation_level)
        self.max_wait_ms = max_wait_ms
        self.max_partition_bytes = max_partition_bytes
        self.max_bytes = max_bytes
        self.client_id = client_id
        # security: a reference_impl.client.security.ClientSecurity (TLS/SASL), e.g. target.raw_security().
        self._cc = ClusterClient(bootstrap, client_id=client_id, timeout=request_timeout_s, security=security)
        self._timeout = request_timeout_s
        self._conns: dict[int, RawClient] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._meta = PartitionMetadata(self._cc)
        self.fetch_info: dict[TopicPartition, FetchInfo] = {}  # the last fetch of each partition
        # cumulative per partition: batches dropped as aborted, control batches passed over
        self.skipped_aborted: dict[TopicPartition, int] = {}
        self.skipped_control: dict[TopicPartition, int] = {}
        self.aborted_transactions_seen: dict[TopicPartition, set[tuple[int, int]]] = {}
        self._hook = history_hook

    # -- assignment --------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition], *, from_beginning: bool = True) -> None:
        for tp in partitions:
            tp = (tp[0], int(tp[1]))
            if tp not in self._positions:
                self._positions[tp] = self.list_offset(tp, EARLIEST if from_beginning else LATEST)

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[(tp[0], int(tp[1]))] = offset

    def position(self, tp: TopicPartition) -> int:
        return self._positions[(tp[0], int(tp[1]))]

    # -- offsets -------------------------------------------------------------------------

    def list_offset(self, tp: TopicPartition, timestamp: int, isolation_level: int | None = None) -> int:
        """ListOffsets at this consumer's isolation level: LATEST is the LSO at read_committed."""
        level = self.isolation_level if isolation_level is None else isolation_level
        for attempt in range(50):
            client = self._leader_client(tp)
            version = client.negotiate(LIST_OFFSETS, 9)
            cls = framing.request_schema(LIST_OFFSETS, version)
            req = payloads.build(
                cls,
                replica_id=-1,
                isolation_level=level,
                topics=(
                    payloads.build(
                        payloads.nested(cls, "ListOffsetsTopic"),
                        name=tp[0],
                        partitions=(
                            payloads.build(
                                payloads.nested(cls, "ListOffsetsPartition"),
                                partition_index=tp[1],
                                timestamp=timestamp,
                                current_leader_epoch=-1,
                            ),
                        ),
                    ),
                ),
                timeout=datetime.timedelta(milliseconds=int(self._timeout * 1000)),
            )
            p = client.send(req).topics[0].partitions[0]
            code = int(p.error_code)
            if code == 0:
                return int(p.offset)
            if _retriable(code):
                self._meta.forget(tp)
                time.sleep(0.1)
                continue
            raise ConsumerError(f"ListOffsets {tp} failed with error {code}", code)
        raise ConsumerError(f"ListOffsets {tp} kept failing")

    def end_offset(self, tp: TopicPartition) -> int:
        """High watermark (read_uncommitted) or last stable offset (read_committed)."""
        return self.list_offset(tp, LATEST)

    # -- fetching --------------------------------------------------------------------------

    def poll(self, max_wait_ms: int | None = None, partitions: Iterable[TopicPartition] | None = None) -> list[ConsumedRecord]:
        """One fetch round over the assigned partitions (or the given ones), grouped by leader."""
        out: list[ConsumedRecord] = []
        by_leader: dict[int, list[TopicPartition]] = {}
        wanted = sorted(self._positions) if partitions is None else sorted((t, int(p)) for t, p in partitions)
        for tp in wanted:
            try:
                by_leader.setdefault(self._leader(tp), []).append(tp)
            except LookupError:
                continue
        for node, tps in by_leader.items():
            out.extend(self._fetch(node, tps, self.max_wait_ms if max_wait_ms is None else max_wait_ms))
        return out

    def consume_to_end(self, partitions: Iterable[TopicPartition] | None = None, timeout_s: float = 30.0) -> list[ConsumedRecord]:
        """Poll until every partition's position reaches the end offset at this isolation
        level as it was when the call started (the LSO at read_committed)."""
        tps = sorted(self._positions if partitions is None else [(t, int(p)) for t, p in partitions])
        self.assign(tps)
        ends = {tp: self.end_offset(tp) for tp in tps}
        deadline = time.monotonic() + timeout_s
        out: list[ConsumedRecord] = []
        while any(self._positions[tp] < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"positions {[self._positions[tp] for tp in tps]} did not reach {[ends[tp] for tp in tps]}"
                )
            behind = [tp for tp in tps if self._positions[tp] < ends[tp]]
            out.extend(self.poll(partitions=behind))
        return out

    def _fetch(self, node: int, tps: list[TopicPartition], max_wait_ms: int) -> list[ConsumedRecord]:
        client = self._conn(node)
        version = client.negotiate(FETCH, 16)
        if version is None or version < 4:
            raise ConsumerError("broker cannot take Fetch v4+ (isolation level)")
        cls = framing.request_schema(FETCH, version)
        by_id = version >= 13
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        topics = []
        for t, ps in by_topic.items():
            topics.append(
                payloads.build(
                    payloads.nested(cls, "FetchTopic"),
                    topic=t,
                    topic_id=self._topic_id(t) if by_id else None,
                    partitions=tuple(
                        payloads.build(
                            payloads.nested(cls, "FetchPartition"),
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=self._positions[(t, p)],
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=self.max_partition_bytes,
                        )
                        for p in ps
                    ),
                )
            )
        req = payloads.build(
            cls,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=self.isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=tuple(topics),
            forgotten_topics_data=(),
            rack_id="",
        )
        try:
            resp = client.send(req, timeout=self._timeout + max_wait_ms / 1000)
        except (ConnectionError, OSError):
            dead = self._conns.pop(node, None)
            if dead is not None:
                dead.close()
            for tp in tps:
                self._meta.forget(tp)
            return []
        if int(resp.error_code) != 0:
            if _retriable(int(resp.error_code)):
                return []
            raise ConsumerError(f"Fetch failed: error {int(resp.error_code)}", int(resp.error_code))
        names = self._meta.topic_names()
        out: list[ConsumedRecord] = []
        for tr in resp.responses:
            topic = payloads.get(tr, "topic") or names.get(payloads.get(tr, "topic_id"))
            for pd in tr.partitions:
                tp = (topic, int(pd.partition_index))
                code = int(pd.error_code)
                if code != 0:
                    if _retriable(code):
                        self._meta.forget(tp)
                        continue
                    raise ConsumerError(f"Fetch {tp} failed with error {code}", code)
                recs, info = self._records_of(tp, pd)
                self.fetch_info[tp] = info
                self.skipped_aborted[tp] = self.skipped_aborted.get(tp, 0) + info.skipped_aborted_batches
                self.skipped_control[tp] = self.skipped_control.get(tp, 0) + info.skipped_control_batches
                self.aborted_transactions_seen.setdefault(tp, set()).update(info.aborted_transactions)
                out.extend(recs)
                if self._hook is not None:
                    self._hook(
                        {
                            "type": "fetch",
                            "topic": tp[0],
                            "partition": tp[1],
                            "isolation_level": self.isolation_level,
                            "records": len(recs),
                            "position": self._positions[tp],
                            "high_watermark": info.high_watermark,
                            "last_stable_offset": info.last_stable_offset,
                            "aborted_transactions": list(info.aborted_transactions),
                        }
                    )
        return out

    def _records_of(self, tp: TopicPartition, pd: Any) -> tuple[list[ConsumedRecord], FetchInfo]:
        fetch_offset = self._positions[tp]
        aborted_list = tuple(
            (int(a.producer_id), int(a.first_offset)) for a in (payloads.get(pd, "aborted_transactions") or ())
        )
        out, skipped_aborted, skipped_control = filter_batches(
            tp, payloads.get(pd, "records"), fetch_offset, self.isolation_level, aborted_list
        )
        batches_end = _end_of_batches(payloads.get(pd, "records"))
        if batches_end is not None and batches_end > fetch_offset:
            self._positions[tp] = batches_end
        info = FetchInfo(
            high_watermark=int(pd.high_watermark),
            last_stable_offset=int(payloads.get(pd, "last_stable_offset", -1)),
            log_start_offset=int(payloads.get(pd, "log_start_offset", -1)),
            aborted_transactions=aborted_list,
            skipped_aborted_batches=skipped_aborted,
            skipped_control_batches=skipped_control,
        )
        return out, info

    # -- plumbing ----------------------------------------------------------------------------

    def _leader(self, tp: TopicPartition) -> int:
        return self._meta.leader(tp)

    def _leader_client(self, tp: TopicPartition) -> RawClient:
        for _ in range(50):
            try:
                return self._conn(self._leader(tp))
            except LookupError:
                time.sleep(0.1)
        raise ConsumerError(f"no leader for {tp}")

    def _topic_id(self, topic: str) -> Any:
        return self._meta.topic_id(topic)

    def _conn(self, node: int) -> RawClient:
        c = self._conns.get(node)
        if c is None:
            if node not in self._cc.nodes:
                self._cc.refresh()
            host, port = self._cc.nodes[node]
            c = self._conns[node] = self._cc.connect_to(host, port)
        return c

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._cc.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def filter_batches(
    tp: TopicPartition,
    data: bytes | None,
    fetch_offset: int,
    isolation_level: int,
    aborted_transactions: Iterable[tuple[int, int]],
) -> tuple[list[ConsumedRecord], int, int]:
    """Records a consumer returns from one partition's fetched data.

    Returns (records, skipped aborted batches, skipped control batches). Pure function:
    the read_committed filtering of Kafka's consumer, usable by checkers on raw fetches."""
    heap = [(first, pid) for pid, first in aborted_transactions]
    heapq.heapify(heap)
    aborted_pids: set[int] = set()
    out: list[ConsumedRecord] = []
    skipped_aborted = skipped_control = 0
    for batch in records.decode_batches(data):
        h = batch.header
        if h.last_offset < fetch_offset:
            continue
        if isolation_level == READ_COMMITTED and h.has_producer_id:
            while heap and heap[0][0] <= h.last_offset:
                aborted_pids.add(heapq.heappop(heap)[1])
            if h.is_control:
                if batch.records:
                    ctype, _ = records.parse_control_record(batch.records[0])
                    if ctype is records.ControlType.ABORT:
                        aborted_pids.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in aborted_pids:
                skipped_aborted += 1
                continue
        if h.is_control:
            skipped_control += 1
            continue
        for r in batch.records:
            if r.offset < fetch_offset:
                continue
            out.append(
                ConsumedRecord(
                    topic=tp[0],
                    partition=tp[1],
                    offset=r.offset,
                    timestamp=r.timestamp,
                    key=r.key,
                    value=r.value,
                    headers=tuple(r.headers),
                    producer_id=h.producer_id,
                    producer_epoch=h.producer_epoch,
                    transactional=h.is_transactional,
                )
            )
    return out, skipped_aborted, skipped_control


def _end_of_batches(data: bytes | None) -> int | None:
    batches, _ = records.split_batches(data)
    if not batches:
        return None
    return records.parse_batch_header(batches[-1]).next_offset


def _retriable(code: int) -> bool:
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


__all__ = [
    "ConsumedRecord",
    "Consumer",
    "ConsumerError",
    "FetchInfo",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "filter_batches",
    "parse_isolation_level",
]
