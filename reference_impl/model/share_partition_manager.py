"""The share-partition leader side of a broker (Kafka's SharePartitionManager), as a model.

One `SharePartition` per (share group, topic id, partition), created on the first fetch
of a member of that group and initialised from the persister (the share coordinator:
ReadShareGroupState, or InitializeShareGroupState when nothing is stored yet). Every
change that Kafka persists -- acknowledgements, lock expiry, records released when a
member's session closes -- is written back (WriteShareGroupState semantics: start offset
plus the durable state batches). Share sessions live in one `ShareSessionCache` per node.

Pure: no I/O, no clock of its own (`now_ms` is passed in). Handlers call it; the broker
ticks it (`tick(now_ms)`) and tells it about closed connections
(`release_connection(connection_id)`).

Configuration: broker defaults (`SharePartitionConfig`) plus per-group overrides in
`group_configs[group_id]`, keyed by Kafka's group config names
(`share.auto.offset.reset`, `share.record.lock.duration.ms`, `share.isolation.level`,
`share.delivery.count.limit`, `share.partition.max.record.locks`,
`share.renew.acknowledge.enable`).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from reference_impl.model.partition_log import IsolationLevel, PartitionLog
from reference_impl.model.share_partition import (
    AckResult,
    AcquiredRecords,
    SharePartition,
)
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.share_session import DEFAULT_MAX_SHARE_SESSIONS, ShareSession, ShareSessionCache
from reference_impl.model.share_state_records import SharePartitionKey, StateBatch

SharePartitionId = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)

_ISOLATION = {"read_uncommitted": IsolationLevel.READ_UNCOMMITTED, "read_committed": IsolationLevel.READ_COMMITTED}


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """Outcome of one partition of a ShareFetch."""

    acquired: tuple[AcquiredRecords, ...] = ()
    records: bytes = b""
    error: ErrorCode = ErrorCode.none
    message: str | None = None


class SharePartitionManager:
    """Share-partitions and share sessions of the cluster's share-partition leaders."""

    def __init__(
        self,
        share_coordinator: Any,
        config: SharePartitionConfig | None = None,
        *,
        max_share_sessions: int = DEFAULT_MAX_SHARE_SESSIONS,
        session_eviction_ms: int | None = None,
    ) -> None:
        self.share_coordinator = share_coordinator
        # Kafka 4.4.0 (observed) keeps the delivery count of records released when a
        # session closes (final epoch or disconnect): the next delivery counts 2.
        self.config = config or SharePartitionConfig(release_on_close_decrements_delivery_count=False)
        self.max_share_sessions = max_share_sessions
        self.session_eviction_ms = session_eviction_ms
        # Kafka 4.x's share-partition leader does not ask the group coordinator whether
        # the member belongs to the group (observed on 4.4.0: a member id that never sent
        # ShareGroupHeartbeat fetches and acknowledges normally). True = check it
        # (UNKNOWN_MEMBER_ID), a stricter reading of the KIP.
        self.require_group_membership = False
        # Kafka: a new epoch-0 ShareFetch for an open session only drops the session; the
        # member keeps its acquired records until their locks expire (observed on 4.4.0).
        # The KIP says the old session's acquired records are released. True = the KIP.
        self.release_on_session_replace = False
        self._broken_reload: set[SharePartitionId] = set()
        self.group_configs: dict[str, dict[str, Any]] = {}
        self.partitions: dict[SharePartitionId, SharePartition] = {}
        self._caches: dict[int, ShareSessionCache] = {}
        self.persist_errors: list[tuple[SharePartitionId, ErrorCode]] = []

    # -- configuration -----------------------------------------------------------------

    def config_for(self, group_id: str) -> SharePartitionConfig:
        cfg = dataclasses.replace(self.config)
        g = self.group_configs.get(group_id) or {}
        if "share.auto.offset.reset" in g:
            cfg.auto_offset_reset = g["share.auto.offset.reset"]
        if "share.record.lock.duration.ms" in g:
            cfg.group_record_lock_duration_ms = int(g["share.record.lock.duration.ms"])
        if "share.isolation.level" in g:
            value = g["share.isolation.level"]
            cfg.isolation_level = _ISOLATION[value] if isinstance(value, str) else IsolationLevel(int(value))
        if "share.delivery.count.limit" in g:
            cfg.delivery_count_limit = int(g["share.delivery.count.limit"])
        if "share.partition.max.record.locks" in g:
            cfg.partition_max_record_locks = int(g["share.partition.max.record.locks"])
        if "share.renew.acknowledge.enable" in g:
            cfg.renew_acknowledge_enabled = str(g["share.renew.acknowledge.enable"]).lower() == "true"
        cfg.__post_init__()
        return cfg

    def set_group_config(self, group_id: str, **configs: Any) -> None:
        """Group configs by Kafka name with dots as underscores, e.g.
        share_auto_offset_reset="earliest". Applies to share-partitions created later and
        to the lock duration / isolation of existing ones."""
        g = self.group_configs.setdefault(group_id, {})
        for name, value in configs.items():
            g[name.replace("_", ".")] = value
        self.refresh_group_config(group_id)

    def refresh_group_config(self, group_id: str) -> None:
        """Group configs changed: existing share-partitions of the group use them from now
        on (Kafka reads the group's lock duration and isolation level at each acquisition)."""
        for (gid, _t, _p), sp in self.partitions.items():
            if gid == group_id:
                sp.config = self.config_for(group_id)

    def lock_duration_ms(self, group_id: str) -> int:
        return self.config_for(group_id).lock_duration_ms

    # -- sessions ----------------------------------------------------------------------

    def sessions(self, node_id: int) -> ShareSessionCache:
        cache = self._caches.get(node_id)
        if cache is None:
            cache = self._caches[node_id] = ShareSessionCache(
                self.max_share_sessions, eviction_ms=self.session_eviction_ms, seeded_bugs=self.config.seeded_bugs
            )
        return cache

    def release_connection(self, connection_id: Hashable) -> list[ShareSession]:
        """A client connection closed: its share session closes and the member's acquired
        records on that node's share-partitions are released."""
        closed = []
        for cache in self._caches.values():
            session = cache.on_disconnect(connection_id)
            if session is not None:
                self.release_member(session.key.group_id, session.key.member_id, session.partitions)
                closed.append(session)
        return closed

    def close_session(self, node_id: int, group_id: str, member_id: str) -> ShareSession | None:
        """A final epoch: remove the session and release the member's records in it."""
        session = self.sessions(node_id).remove(group_id, member_id)
        if session is not None:
            self.release_member(group_id, member_id, session.partitions)
        return session

    # -- share-partitions --------------------------------------------------------------

    def get(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition | None:
        return self.partitions.get((group_id, topic_id, partition))

    def get_or_create(
        self, group_id: str, topic_id: uuid.UUID, partition: int, log: PartitionLog, leader_epoch: int, now_ms: int
    ) -> SharePartition:
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        config = self.config_for(group_id)
        sc = self.share_coordinator
        result = sc.read(group_id, topic_id, partition, leader_epoch, now_ms=now_ms) if sc is not None else None
        if key in self._broken_reload:
            self._broken_reload.discard(key)
            result = None
        if result is not None and result.ok:
            sp = SharePartition.from_state(
                group_id, log.topic, partition, result.start_offset, result.state_batches, config,
                state_epoch=result.state_epoch, leader_epoch=leader_epoch, log=log, now_ms=now_ms,
            )
            # A start offset of -1 (initialised by the group coordinator, never written)
            # is resolved from share.auto.offset.reset in memory only: like Kafka, nothing
            # is written until the first state change, so DescribeShareGroupOffsets still
            # reports -1 after a fetch without acknowledgements.
        else:
            # Nothing stored (the group coordinator has not initialised it): the SPSO comes
            # from share.auto.offset.reset and is persisted (InitializeShareGroupState).
            sp = SharePartition.initialize(group_id, log, now_ms, config, leader_epoch=leader_epoch)
            if sc is not None:
                init = sc.initialize(group_id, topic_id, partition, sp.state_epoch, sp.spso, now_ms=now_ms)
                if not init.ok:
                    self.persist_errors.append((key, init.error))
        self.partitions[key] = sp
        return sp

    def _persist(self, key: SharePartitionId, sp: SharePartition, now_ms: int | None) -> None:
        sc = self.share_coordinator
        if sc is None:
            return
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in sp.state_batches()]
        group_id, topic_id, partition = key
        result = sc.write(
            group_id, topic_id, partition, state_epoch=sp.state_epoch, leader_epoch=sp.leader_epoch,
            start_offset=sp.spso, state_batches=batches, delivery_complete_count=_delivery_complete_count(batches),
            now_ms=now_ms,
        )
        if not result.ok:
            self.persist_errors.append((key, result.error))

    def persisted(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Any:
        sc = self.share_coordinator
        if sc is None:
            return None
        return sc.state(SharePartitionKey(group_id, topic_id, partition))

    # -- operations --------------------------------------------------------------------

    def acquire(
        self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int, log: PartitionLog, *,
        leader_epoch: int, max_records: int, max_bytes: int, now_ms: int, record_limit: bool = False,
    ) -> FetchedPartition:
        sp = self.get_or_create(group_id, topic_id, partition, log, leader_epoch, now_ms)
        sp.tick(now_ms)
        cap = _records_within_bytes(sp, log, max_bytes)
        acquired = sp.acquire(member_id, log, min(max_records, cap), now_ms=now_ms, record_limit=record_limit)
        if not acquired:
            return FetchedPartition()
        return FetchedPartition(tuple(acquired), _records_for(log, acquired))

    def can_acquire(self, group_id: str, topic_id: uuid.UUID, partition: int, log: PartitionLog) -> bool:
        sp = self.partitions.get((group_id, topic_id, partition))
        return sp.can_acquire(log) if sp is not None else True

    def acknowledge(
        self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int,
        batches: Sequence[tuple[int, int, Sequence[int]]], now_ms: int,
    ) -> AckResult:
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            return AckResult(ErrorCode.unknown_topic_or_partition, "No share partition for this group.")
        sp.tick(now_ms)
        result = sp.acknowledge(member_id, batches, now_ms)
        if result.ok:
            self._persist(key, sp, now_ms)
        return result

    def release_member(self, group_id: str, member_id: str, partitions: Iterable[tuple[uuid.UUID, int]] | None = None) -> int:
        """Release everything `member_id` holds (in `partitions`, or all of the group's)."""
        wanted = None if partitions is None else set(partitions)
        released = 0
        for key, sp in self.partitions.items():
            if key[0] != group_id or (wanted is not None and (key[1], key[2]) not in wanted):
                continue
            changes = sp.release_member(member_id)
            if changes:
                released += sum(c.last_offset - c.first_offset + 1 for c in changes)
                self._persist(key, sp, None)  # the share coordinator's clock stamps the write
        return released

    def tick(self, now_ms: int) -> bool:
        """Expire acquisition locks; writes the new state of every partition that changed."""
        changed = False
        for key, sp in self.partitions.items():
            deadline = sp.next_lock_deadline()
            if deadline is None or deadline > now_ms:
                continue
            if sp.tick(now_ms):
                if not self.config.seeded_bugs.has(bugs.SHARE_LOCK_EXPIRY_NOT_PERSISTED):
                    self._persist(key, sp, now_ms)
                changed = True
        return changed

    # -- KIP-1289 ---------------------------------------------------------------------

    def stage_txn(
        self, group_id: str, member_id: str, parts: Sequence[tuple[uuid.UUID, int, Sequence[tuple[int, int, Sequence[int]]]]],
        producer_id: int, producer_epoch: int, now_ms: int,
    ) -> list[AckResult]:
        """Stage one TxnShareAcknowledge, all or nothing across its partitions (corner case
        11): when a partition fails, the ones already staged are restored before answering.
        Nothing is persisted: TX_PENDING lives in memory only (corner case 1)."""
        saved: list[tuple[SharePartition, tuple]] = []
        results: list[AckResult] = []
        for topic_id, partition, batches in parts:
            sp = self.partitions.get((group_id, topic_id, partition))
            if sp is None:
                results.append(AckResult(ErrorCode.invalid_record_state, "No records of this share-partition are acquired."))
                continue
            sp.tick(now_ms)
            saved.append((sp, sp.checkpoint()))
            results.append(sp.stage_txn(member_id, batches, producer_id, producer_epoch, now_ms))
        if not all(r.ok for r in results):
            for sp, cp in saved:
                sp.restore(cp)
        return results

    def apply_txn_marker(self, producer_id: int, producer_epoch: int, committed: bool, now_ms: int | None = None,
                         *, only: Callable[[SharePartitionId], bool]) -> int:
        """The KIP-1289 hook of WriteTxnMarkers: offer the marker to the share-partitions it
        reaches (`only`: those on the receiving broker, or of the groups on the marked state
        partition); returns how many records it resolved. Resolved partitions persist."""
        resolved = 0
        broadcast = self.config.seeded_bugs.has(bugs.TXN_SHARE_MARKERS_BROADCAST)  # the deliberate bug
        for key, sp in self.partitions.items():
            if not (broadcast or only(key)):
                continue
            changes = sp.apply_txn_marker(producer_id, producer_epoch, committed)
            if changes:
                resolved += sum(c.last_offset - c.first_offset + 1 for c in changes)
                self._persist(key, sp, now_ms)
        return resolved

    def txn_pending_count(self) -> int:
        """KIP-1289 TxnPendingRecordsCount over all share-partitions."""
        return sum(sp.txn_pending_count() for sp in self.partitions.values())

    def txn_lock_expired_count(self) -> int:
        """KIP-1289 TxnPendingLockExpiredCount."""
        return sum(sp.txn_lock_expired for sp in self.partitions.values())

    def forget_txn_pending(self, led_here: Callable[[str, int], bool]) -> int:
        """A share-partition leader crashed or lost leadership (corner cases 1 and 12): its
        in-memory state is gone, so partitions holding TX_PENDING records are dropped and
        reload from the share coordinator on next use. Only those: other partitions keep the
        reference's KIP-932 behaviour. Returns how many were dropped."""
        return len(self._drop_led(led_here, lambda sp: sp.txn_pending_count() > 0))

    def crash(self, node_id: int, led_here: Callable[[str, int], bool]) -> None:
        """Share-partition leader `node_id` crashed: its share sessions and the in-memory
        state of every share-partition it led (acquisitions, locks, delivery counts not yet
        written) are gone. The next leader initialises them from the share coordinator
        (ReadShareGroupState), as Kafka's SharePartition does after a leader change."""
        self._caches.pop(node_id, None)
        self._leader_moved(self._drop_led(led_here))

    def broken_leader_moved(self, led_here: Callable[[str, int], bool]) -> None:
        """A node went unreachable (``isolate``): with the seeded bug
        ``share-leader-move-forgets-state`` the partitions it led are dropped and their next
        leader ignores the persisted state; without it they stay as they are."""
        if self.config.seeded_bugs.has(bugs.SHARE_LEADER_MOVE_FORGETS_STATE):
            self._leader_moved(self._drop_led(led_here))

    def _drop_led(
        self, led_here: Callable[[str, int], bool], which: Callable[[SharePartition], bool] = lambda sp: True
    ) -> list[SharePartitionId]:
        """Drop the in-memory share-partitions (those `which` selects) of a leader that
        stopped; returns their keys."""
        gone = [k for k, sp in self.partitions.items() if led_here(sp.topic, sp.partition) and which(sp)]
        for key in gone:
            del self.partitions[key]
        return gone

    def _leader_moved(self, gone: list[SharePartitionId]) -> None:
        """Partitions dropped because their leader stopped: the seeded bug
        ``share-leader-move-forgets-state`` makes their next leader ignore the persisted
        state (on crash and on isolate alike)."""
        if self.config.seeded_bugs.has(bugs.SHARE_LEADER_MOVE_FORGETS_STATE):
            self._broken_reload.update(gone)

    def forget_group_topic(self, group_id: str, topic_id: uuid.UUID) -> None:
        """Drop the in-memory share-partitions of (group, topic): an admin reset or delete
        changed the persisted state, and the next fetch must reload it (Kafka's leader is
        fenced by the new state epoch and re-reads it)."""
        for key in [k for k in self.partitions if k[0] == group_id and k[1] == topic_id]:
            del self.partitions[key]

    def forget_topic(self, topic_id: uuid.UUID) -> None:
        for key in [k for k in self.partitions if k[1] == topic_id]:
            del self.partitions[key]


_TERMINAL_STATES = (2, 4)  # Acknowledged, Archived (persisted state ids)


def _delivery_complete_count(batches: Sequence[Any]) -> int:
    """Records of the persisted in-flight window that reached a final state (KIP-1226's
    deliveryCompleteCount; lag = high watermark - start offset - this)."""
    return sum(b.last_offset - b.first_offset + 1 for b in batches if int(b.delivery_state) in _TERMINAL_STATES)


def _records_within_bytes(sp: SharePartition, log: PartitionLog, max_bytes: int) -> int:
    """Record budget from a byte budget: the first batch always, then whole batches that fit
    (counted from the first offset the share-partition would hand out)."""
    if max_bytes <= 0:
        return 0
    avail = [r.first_offset for r in sp.ranges if r.state.name == "AVAILABLE"]
    start = avail[0] if avail else sp.speo
    used = 0
    last = None
    for b in log.batches_from(max(start, log.log_start_offset)):
        if last is not None and used + b.size > max_bytes:
            break
        used += b.size
        last = b.last_offset
    if last is None:
        return 2**31 - 1
    return max(1, last - start + 1)


def _records_for(log: PartitionLog, acquired: Sequence[AcquiredRecords]) -> bytes:
    """The log batches that hold the acquired offsets, in offset order."""
    lo = min(a.first_offset for a in acquired)
    hi = max(a.last_offset for a in acquired)
    out = []
    for b in log.batches_from(lo, hi + 1):
        if b.last_offset < lo:
            continue
        if any(a.first_offset <= b.last_offset and b.base_offset <= a.last_offset for a in acquired):
            out.append(b.data)
    return b"".join(out)


__all__ = ["FetchedPartition", "SharePartitionManager"]
