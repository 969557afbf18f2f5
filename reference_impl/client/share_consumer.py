"""Reference share consumer (KIP-932 queues) over the raw protocol client.

Synchronous and explicit, in the style of the reference transactional producer: every
call does its round trips before it returns, every request/response goes to an optional
history hook, and the state (membership, assignment, share sessions per broker, records
in flight, acknowledgements waiting to be sent) is plain data on the object.

Behaviour follows Kafka's Java share consumer (4.1+; ShareConsumerImpl,
ShareConsumeRequestManager, ShareMembershipManager):

  * Membership: ShareGroupHeartbeat v1 from `poll` (no background thread) whenever the
    heartbeat interval has passed; member id generated here (see share_membership).
  * Fetching: one share session per partition leader. ShareFetch epoch 0 opens it with
    the full partition list; later requests (epoch 1, 2, ...) list only partitions added
    or carrying acknowledgements and name removed partitions as forgotten. Session errors
    (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH) reset the session to epoch 0.
    Acknowledgements are never sent on an epoch-0 request (the broker refuses them).
  * Only offsets inside the response's AcquiredRecords are delivered, each with its
    delivery count; acquired offsets that have no data record (control records,
    compacted-away offsets) are acknowledged as GAP.
  * Implicit mode (default): the next poll, commit_sync or commit_async accepts every record
    delivered by the previous poll; acknowledge() raises IllegalShareStateError.
  * Explicit mode: poll raises IllegalShareStateError while a record of the previous poll is
    unacknowledged ("All records must be acknowledged in explicit acknowledgement mode.").
  * Acknowledgements ride on the next ShareFetch to that broker (poll, commit_async) or go in
    a ShareAcknowledge (commit_sync). Results go to the acknowledgement commit callback, one
    call per partition and response: callback({(topic, partition): {offsets}}, error or None).
  * RENEW (KIP-1222) needs ShareFetch/ShareAcknowledge v2 and explicit mode; the request that
    carries it sets IsRenewAck, and the renewed record is returned again by the next poll.
  * close(): acknowledged-but-unsent acknowledgements go in a ShareAcknowledge with epoch -1
    to every broker with an open session (closing it, which releases what is still
    acquired), then the member leaves with heartbeat epoch -1.
"""

from __future__ import annotations

import datetime
import enum
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reference_impl.client.raw_client import ClusterClient, ConnectionClosed, RawClient
from reference_impl.client.share_group_metadata import ShareGroupMetadata
from reference_impl.client.share_membership import (
    HeartbeatOutcome,
    MemberState,
    ShareGroupError,
    ShareMembership,
    new_member_id,
)
from reference_impl.client.transactional_producer import _summarize
from reference_impl.client.txn_state import error_name
from reference_impl.protocol import framing, payloads, records
from reference_impl.protocol.api_keys import ApiKey
from kio.schema.errors import ErrorCode

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
API_NAMES = {3: "Metadata", 10: "FindCoordinator", 76: "ShareGroupHeartbeat", 78: "ShareFetch", 79: "ShareAcknowledge"}

NONE = ErrorCode.none
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed
UNKNOWN_TOPIC_ID, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_topic_id, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch
SHARE_SESSION_LIMIT_REACHED = ErrorCode.share_session_limit_reached
SESSION_ERRORS = frozenset({SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH})
METADATA_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH})
FATAL_ERRORS = frozenset({TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED})

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = 2**31 - 1

TopicPartition = tuple[str, int]
TopicIdPartition = tuple[uuid.UUID, int]


class AcknowledgeType(enum.IntEnum):
    GAP = 0  # wire-only: an acquired offset with no record
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222, ShareFetch/ShareAcknowledge v2


class ShareConsumerError(Exception):
    """Base of the share consumer's errors."""


class IllegalShareStateError(ShareConsumerError):
    """Kafka's IllegalStateException: the call is not allowed in the consumer's state."""


class UnsupportedShareVersionError(ShareConsumerError):
    """The broker lacks the share RPCs (or the version a feature needs, e.g. RENEW)."""


class ShareFetchError(ShareConsumerError):
    def __init__(self, api: str, error_code: int, message: str | None = None) -> None:
        super().__init__(f"{api} failed: {error_name(error_code)}" + (f" ({message})" if message else ""))
        self.error_code = error_code


class AcknowledgementError(ShareConsumerError):
    """The broker refused acknowledgements for one partition (e.g. INVALID_RECORD_STATE)."""

    def __init__(self, topic: str, partition: int, error_code: int, message: str | None = None) -> None:
        super().__init__(f"acknowledgement of {topic}-{partition} failed: {error_name(error_code)}" + (f" ({message})" if message else ""))
        self.topic, self.partition, self.error_code = topic, partition, error_code


@dataclass(frozen=True)
class ShareRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    delivery_count: int
    topic_id: uuid.UUID | None = None
    leader_id: int = -1


@dataclass
class InFlight:
    record: ShareRecord
    ack: AcknowledgeType | None = None


@dataclass(frozen=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one type for the whole range, or one per offset


def coalesce_acks(acks: dict[int, int]) -> list[AckBatch]:
    """Acknowledgements {offset: type} -> wire batches: contiguous offsets form one batch,
    with a single type when they all share it, else one type per offset."""
    out: list[AckBatch] = []
    run: list[int] = []
    for off in sorted(acks):
        if run and off != run[-1] + 1:
            out.append(_batch(run, acks))
            run = []
        run.append(off)
    if run:
        out.append(_batch(run, acks))
    return out


def _batch(run: list[int], acks: dict[int, int]) -> AckBatch:
    types = tuple(int(acks[o]) for o in run)
    if len(set(types)) == 1:
        types = types[:1]
    return AckBatch(run[0], run[-1], types)


def expand_ack_batches(batches: Iterable[AckBatch]) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in batches:
        for i, off in enumerate(range(b.first_offset, b.last_offset + 1)):
            out[off] = b.types[0] if len(b.types) == 1 else b.types[i]
    return out


def next_session_epoch(epoch: int) -> int:
    """Share session epochs count 1, 2, ... and wrap from INT32_MAX to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


def acquired_share_records(
    topic: str,
    partition: int,
    data: bytes | None,
    acquired: Iterable[tuple[int, int, int]],
    *,
    topic_id: uuid.UUID | None = None,
    leader_id: int = -1,
) -> tuple[list[ShareRecord], list[int]]:
    """Records of a ShareFetch partition response that this member acquired, and the
    acquired offsets without a data record (to be acknowledged as GAP).

    `acquired` holds (first_offset, last_offset, delivery_count) ranges; records of the
    returned batches outside them belong to other members or other states and are dropped."""
    by_offset: dict[int, tuple[records.Record, records.BatchHeader]] = {}
    for batch in records.decode_batches(data) if data else []:
        if batch.is_control:
            continue
        for r in batch.records:
            by_offset[r.offset] = (r, batch.header)
    out: list[ShareRecord] = []
    gaps: list[int] = []
    for first, last, count in sorted(acquired):
        for off in range(first, last + 1):
            hit = by_offset.get(off)
            if hit is None:
                gaps.append(off)
                continue
            r, header = hit
            ts = header.max_timestamp if header.timestamp_type == records.TimestampType.LOG_APPEND_TIME else r.timestamp
            out.append(ShareRecord(topic, partition, off, r.key, r.value, tuple(r.headers), ts, int(count), topic_id, leader_id))
    return out, gaps


@dataclass
class ShareSession:
    """One share session with one broker (Kafka's ShareSessionHandler)."""

    node_id: int
    epoch: int = INITIAL_EPOCH
    partitions: set[TopicIdPartition] = field(default_factory=set)
    # what the request in flight would change: (added, forgotten)
    _pending_change: tuple[frozenset[TopicIdPartition], frozenset[TopicIdPartition]] | None = None

    @property
    def is_open(self) -> bool:
        return self.epoch > 0

    def plan(self, assigned: set[TopicIdPartition], acks: dict[TopicIdPartition, dict[int, int]]) -> tuple[dict[TopicIdPartition, dict[int, int]], set[TopicIdPartition]]:
        """Partitions to list (with the acknowledgements to carry) and partitions to forget
        in the next ShareFetch. On epoch 0 the full assignment is listed, without acks."""
        if self.epoch == INITIAL_EPOCH:
            listed = {tp: {} for tp in assigned}
            self._pending_change = (frozenset(assigned), frozenset())
            return listed, set()
        added = assigned - self.partitions
        forgotten = self.partitions - assigned
        listed: dict[TopicIdPartition, dict[int, int]] = {tp: {} for tp in added}
        for tp, a in acks.items():
            if tp in assigned and a:
                listed[tp] = dict(a)
        self._pending_change = (frozenset(added), frozenset(forgotten))
        return listed, forgotten

    def on_response(self, error_code: int) -> None:
        if error_code in SESSION_ERRORS:
            self.reset()
            return
        if error_code == NONE and self._pending_change is not None:
            added, forgotten = self._pending_change
            if self.epoch == INITIAL_EPOCH:
                self.partitions = set(added)
            else:
                self.partitions = (self.partitions | added) - forgotten
            self.epoch = next_session_epoch(self.epoch)
        self._pending_change = None

    def on_acknowledge_response(self, error_code: int) -> None:
        if error_code in SESSION_ERRORS:
            self.reset()
        elif error_code == NONE:
            self.epoch = next_session_epoch(self.epoch)

    def reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self._pending_change = None

    def close(self) -> None:
        self.epoch = FINAL_EPOCH
        self.partitions = set()


class FetchBuffer:
    """Records delivered by the last poll and their acknowledgements (Kafka's ShareFetch)."""

    def __init__(self) -> None:
        self.in_flight: dict[tuple[str, int, int], InFlight] = {}

    def add(self, recs: Iterable[ShareRecord]) -> None:
        for r in recs:
            self.in_flight[(r.topic, r.partition, r.offset)] = InFlight(r)

    def acknowledge(self, topic: str, partition: int, offset: int, ack: AcknowledgeType) -> None:
        entry = self.in_flight.get((topic, partition, offset))
        if entry is None:
            raise IllegalShareStateError(f"record {topic}-{partition}@{offset} is not in flight (not from the last poll, or already sent)")
        entry.ack = AcknowledgeType(ack)

    def all_acknowledged(self) -> bool:
        return all(e.ack is not None for e in self.in_flight.values())

    def unacknowledged(self) -> list[ShareRecord]:
        return [e.record for e in self.in_flight.values() if e.ack is None]

    def acknowledge_all(self, ack: AcknowledgeType) -> None:
        for e in self.in_flight.values():
            if e.ack is None:
                e.ack = ack

    def take_acknowledged(self) -> list[InFlight]:
        """Remove and return the acknowledged entries; unacknowledged ones stay."""
        taken = [e for e in self.in_flight.values() if e.ack is not None]
        for e in taken:
            r = e.record
            del self.in_flight[(r.topic, r.partition, r.offset)]
        return taken

    def __len__(self) -> int:
        return len(self.in_flight)


AckCallback = Callable[[dict[TopicPartition, set[int]], Exception | None], None]


class ShareConsumer:
    """A share-group consumer. See the module docstring for the rules it follows.

    `history_hook(event: dict)` receives one event per request/response (`type="request"`)
    and per membership transition (`type="membership"`); `history` keeps them all.
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        acknowledgement_mode: str = "implicit",
        *,
        client_id: str = "kipcheck-share-consumer",
        history_hook: Callable[[dict[str, Any]], None] | None = None,
        max_poll_records: int = 500,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        request_timeout_ms: int = 30_000,
        rack_id: str | None = None,
        member_id: str | None = None,
        max_share_rpc_version: int | None = None,
        cluster: Any = None,
    ) -> None:
        """`cluster` replaces the ClusterClient (unit tests pass a scripted fake)."""
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(f"acknowledgement_mode must be 'implicit' or 'explicit', not {acknowledgement_mode!r}")
        self.group_id = group_id
        self.acknowledgement_mode = acknowledgement_mode
        self.client_id = client_id
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.request_timeout_ms = request_timeout_ms
        self.max_share_rpc_version = max_share_rpc_version
        self.history: list[dict[str, Any]] = []
        self._hook = history_hook
        self.membership = ShareMembership(group_id, member_id=member_id or new_member_id(), rack_id=rack_id)
        self._transitions_reported = 0
        self._cc = cluster if cluster is not None else ClusterClient(bootstrap, client_id=client_id, timeout=request_timeout_ms / 1000 + 5)
        self._coordinator: int | None = None
        self.sessions: dict[int, ShareSession] = {}
        self.buffer = FetchBuffer()
        # node -> (topic id, partition) -> {offset: type}: acknowledgements not yet sent
        self.pending_acks: dict[int, dict[TopicIdPartition, dict[int, int]]] = {}
        self._renewed: list[ShareRecord] = []  # renewed records to hand out again
        self._renew_sent: list[ShareRecord] = []
        self._async_callbacks: list[AckCallback] = []
        self._ack_callback: AckCallback | None = None
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.leaders: dict[TopicIdPartition, int] = {}
        self.acquisition_lock_timeout_ms: int | None = None
        self.acknowledgement_results: list[tuple[TopicPartition, frozenset[int], int]] = []
        self.closed = False
        self._versions: dict[int, int] = {}

    # -- explicit state ------------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    @property
    def member_epoch(self) -> int:
        return self.membership.member_epoch

    @property
    def member_state(self) -> MemberState:
        return self.membership.state

    @property
    def assignment(self) -> set[TopicPartition]:
        """Assigned (topic, partition) pairs; topic ids not yet in metadata are left out."""
        return {(self.topic_names[t], p) for t, p in self.membership.assigned_partitions() if t in self.topic_names}

    @property
    def session_epochs(self) -> dict[int, int]:
        return {n: s.epoch for n, s in self.sessions.items()}

    @property
    def subscription(self) -> tuple[str, ...]:
        return self.membership.subscription

    def set_acknowledgement_commit_callback(self, callback: AckCallback | None) -> None:
        self._ack_callback = callback

    # -- public API ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        self._ensure_open()
        topics = list(topics)
        if not topics:
            raise ValueError("subscribe() needs at least one topic; use unsubscribe() to leave")
        self.membership.subscribe(topics)
        self._refresh_metadata()
        self._report_transitions()

    def unsubscribe(self) -> None:
        self._ensure_open()
        self._close_sessions()
        self.membership.leave()
        self._heartbeat_if_due(force=True)
        self.membership = ShareMembership(self.group_id, member_id=self.membership.member_id, rack_id=self.membership.rack_id)
        self._transitions_reported = 0

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        self._ensure_open()
        if self.acknowledgement_mode == "implicit":
            raise IllegalShareStateError("Implicit acknowledgement of delivery is being used.")
        ack = AcknowledgeType(type)
        if ack is AcknowledgeType.GAP:
            raise ValueError("GAP is not an acknowledgement an application can give")
        if ack is AcknowledgeType.RENEW and self._share_version(record.leader_id) < 2:
            raise UnsupportedShareVersionError("RENEW needs ShareFetch/ShareAcknowledge v2 (Kafka 4.2+)")
        self.buffer.acknowledge(record.topic, record.partition, record.offset, ack)

    # -- KIP-1289 ------------------------------------------------------------------------

    def share_group_metadata(self) -> ShareGroupMetadata:
        """KIP-1289 ShareConsumer.shareGroupMetadata(): this member's identity now, for a
        transactional producer's send_share_acknowledgements_to_transaction."""
        self._ensure_open()
        if not self.membership.member_id:
            raise IllegalShareStateError("the consumer has not joined its share group yet")
        return ShareGroupMetadata(self.group_id, self.member_id, self.member_epoch)

    def transactional_acknowledgements(
        self, records: Iterable[ShareRecord], type: AcknowledgeType | int = AcknowledgeType.ACCEPT,  # noqa: A002
    ) -> dict[TopicPartition, list[tuple[int, int, tuple[int, ...]]]]:
        """Hand `records` over to a producer transaction (KIP-1289 pseudo code: such records
        must not also be acknowledged by the consumer): they leave this consumer's
        acknowledgement buffer, so neither commit_sync nor the next poll acknowledges them,
        and their acknowledgements are returned as wire batches per (topic, partition)."""
        self._ensure_open()
        ack = AcknowledgeType(type)
        if ack not in (AcknowledgeType.ACCEPT, AcknowledgeType.REJECT):
            raise ValueError("only ACCEPT and REJECT can be acknowledged in a transaction")
        per_partition: dict[TopicPartition, dict[int, int]] = {}
        for r in records:
            if self.buffer.in_flight.pop((r.topic, r.partition, r.offset), None) is None:
                raise IllegalShareStateError(f"record {r.topic}-{r.partition}@{r.offset} is not in flight")
            per_partition.setdefault((r.topic, r.partition), {})[r.offset] = int(ack)
        return {
            tp: [(b.first_offset, b.last_offset, b.types) for b in coalesce_acks(acks)]
            for tp, acks in per_partition.items()
        }

    def poll(self, timeout_ms: int) -> list[ShareRecord]:
        self._ensure_open()
        if not self.membership.subscription:
            raise IllegalShareStateError("Consumer is not subscribed to any topics.")
        self._settle_last_poll()
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            self._heartbeat_if_due()
            fetched = self._fetch_round(deadline)
            if self._renewed:
                fetched = self._renewed + fetched
                self._renewed = []
            if fetched or time.monotonic() >= deadline:
                self.buffer.add(fetched)
                return fetched
            if not self.membership.assignment:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def commit_sync(self, timeout_ms: int | None = None) -> dict[TopicPartition, Exception | None]:
        """Send every acknowledgement made so far in ShareAcknowledge requests; return the
        outcome per partition (None = accepted by the broker)."""
        self._ensure_open()
        self._settle_last_poll(commit=True)
        results: dict[TopicPartition, Exception | None] = {}
        for node in list(self.pending_acks):
            results.update(self._acknowledge_node(node, final=False))
        return results

    def commit_async(self, callback: AckCallback | None = None) -> None:
        """Queue the acknowledgements made so far; they ride on the next ShareFetch (the
        next poll) or on close, and the results go to `callback` and the commit callback."""
        self._ensure_open()
        self._settle_last_poll(commit=True)
        if callback is not None:
            self._async_callbacks.append(callback)

    def close(self, timeout_ms: int = 30_000) -> None:
        if self.closed:
            return
        try:
            taken = self.buffer.take_acknowledged()
            self._queue_acks(taken)
            self._close_sessions()
            if self.membership.state not in (MemberState.UNSUBSCRIBED, MemberState.LEFT, MemberState.FATAL):
                self.membership.leave()
                self._heartbeat_if_due(force=True)
        finally:
            self.closed = True
            self._cc.close()

    def __enter__(self) -> "ShareConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- acknowledgement bookkeeping -------------------------------------------------------

    def _ensure_open(self) -> None:
        if self.closed:
            raise IllegalShareStateError("This consumer has already been closed.")

    def _settle_last_poll(self, commit: bool = False) -> None:
        if self.acknowledgement_mode == "explicit":
            if not commit and not self.buffer.all_acknowledged():
                raise IllegalShareStateError("All records must be acknowledged in explicit acknowledgement mode.")
        else:
            self.buffer.acknowledge_all(AcknowledgeType.ACCEPT)
        self._queue_acks(self.buffer.take_acknowledged())

    def _queue_acks(self, entries: Iterable[InFlight]) -> None:
        for e in entries:
            r = e.record
            tid = r.topic_id or self.topic_ids[r.topic]
            node = r.leader_id
            self.pending_acks.setdefault(node, {}).setdefault((tid, r.partition), {})[r.offset] = int(e.ack)
            if e.ack is AcknowledgeType.RENEW:
                self._renew_sent.append(r)

    def _report_ack_results(self, node: int, sent: dict[TopicIdPartition, dict[int, int]], errors: dict[TopicIdPartition, tuple[int, str | None]]) -> dict[TopicPartition, Exception | None]:
        out: dict[TopicPartition, Exception | None] = {}
        for tp, offs in sent.items():
            user_offsets = {o for o, t in offs.items() if t != AcknowledgeType.GAP}
            code, msg = errors.get(tp, (NONE, None))
            name = self.topic_names.get(tp[0], str(tp[0]))
            exc = None if code == NONE else AcknowledgementError(name, tp[1], code, msg)
            out[(name, tp[1])] = exc
            self.acknowledgement_results.append(((name, tp[1]), frozenset(user_offsets), code))
            renewed = [r for r in self._renew_sent if (r.topic_id or self.topic_ids.get(r.topic), r.partition) == tp and offs.get(r.offset) == AcknowledgeType.RENEW]
            for r in renewed:
                self._renew_sent.remove(r)
                if code == NONE:
                    self._renewed.append(r)
            if not user_offsets:
                continue
            for cb in ([self._ack_callback] if self._ack_callback else []) + self._async_callbacks:
                cb({(name, tp[1]): user_offsets}, exc)
        return out

    # -- membership ------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def _heartbeat_if_due(self, force: bool = False) -> None:
        m = self.membership
        if not (force or m.heartbeat_due(self._now_ms())):
            return
        if m.state in (MemberState.UNSUBSCRIBED, MemberState.LEFT, MemberState.FATAL):
            return
        for _attempt in range(3):
            coordinator = self._find_coordinator()
            fields = m.build_heartbeat()
            m.on_heartbeat_sent(self._now_ms())
            try:
                resp = self._send(coordinator, SHARE_GROUP_HEARTBEAT, 1, fields)
            except ConnectionError:
                m.on_heartbeat_failed()
                self._coordinator = None
                if m.state is MemberState.LEAVING:
                    m.on_heartbeat_response(NONE, None, -1, 0, None)
                    break
                continue
            assignment = None
            if resp.assignment is not None:
                assignment = {tp.topic_id: frozenset(int(p) for p in tp.partitions) for tp in resp.assignment.topic_partitions}
            try:
                outcome = m.on_heartbeat_response(
                    int(resp.error_code), resp.member_id, int(resp.member_epoch),
                    int(resp.heartbeat_interval.total_seconds() * 1000), assignment, resp.error_message,
                )
            finally:
                self._report_transitions()
            if outcome is HeartbeatOutcome.FIND_COORDINATOR:
                self._coordinator = None
                time.sleep(0.1)
                continue
            if outcome is HeartbeatOutcome.FENCED:
                continue  # rejoin at once with epoch 0
            if assignment is not None and any(t not in self.topic_names for t in assignment):
                self._refresh_metadata()
            break

    def _find_coordinator(self) -> int:
        if self._coordinator is not None:
            return self._coordinator
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            error, node = self._cc.find_coordinator(self.group_id, 0)
            self._record("FindCoordinator", 10, None, -1, {"key": self.group_id, "key_type": 0}, {"error_code": error, "node_id": node}, 0.0)
            if error == NONE:
                self._coordinator = node
                return node
            if error not in (14, 15) or time.monotonic() >= deadline:
                raise ShareFetchError("FindCoordinator", error)
            time.sleep(0.2)

    def _report_transitions(self) -> None:
        for t in self.membership.transitions[self._transitions_reported:]:
            self._emit({"type": "membership", "from": t.from_state.value, "to": t.to_state.value, "member_epoch": t.member_epoch, "reason": t.reason})
        self._transitions_reported = len(self.membership.transitions)

    # -- metadata --------------------------------------------------------------------------

    def _refresh_metadata(self) -> None:
        topics = list(self.membership.subscription)
        if not topics:
            return
        md = self._cc.refresh(topics)
        self._record("Metadata", 3, None, -1, {"topics": topics}, {"topics": [{"name": t.name, "error_code": int(t.error_code), "topic_id": str(t.topic_id)} for t in md.topics]}, 0.0)
        for t in md.topics:
            if t.error_code != NONE or t.topic_id is None:
                continue
            self.topic_ids[t.name] = t.topic_id
            self.topic_names[t.topic_id] = t.name
            for p in t.partitions:
                self.leaders[(t.topic_id, int(p.partition_index))] = int(p.leader_id)

    # -- fetching --------------------------------------------------------------------------

    def _share_version(self, node: int) -> int:
        if node in self._versions:
            return self._versions[node]
        try:
            client = self._cc.node(node) if node >= 0 else self._cc.bootstrap
        except KeyError:
            client = self._cc.bootstrap
        hi = client.negotiate(SHARE_FETCH, self.max_share_rpc_version)
        ack_hi = client.negotiate(SHARE_ACKNOWLEDGE, self.max_share_rpc_version)
        if hi is None or hi < 1 or ack_hi is None:
            raise UnsupportedShareVersionError(f"broker {node} does not support ShareFetch v1+ (share groups need Kafka 4.1+)")
        self._versions[node] = min(hi, ack_hi)
        return self._versions[node]

    def _fetch_round(self, deadline: float) -> list[ShareRecord]:
        assigned = self.membership.assigned_partitions()
        if any(tp not in self.leaders or self.leaders[tp] < 0 for tp in assigned):
            self._refresh_metadata()
        by_node: dict[int, set[TopicIdPartition]] = {}
        for tp in assigned:
            node = self.leaders.get(tp, -1)
            if node >= 0:
                by_node.setdefault(node, set()).add(tp)
        # acknowledgements for partitions no longer fetched from that broker go in ShareAcknowledge
        for node, acks in list(self.pending_acks.items()):
            stray = {tp for tp in acks if tp not in by_node.get(node, set())}
            if stray:
                self._acknowledge_node(node, final=False, only=stray)
        nodes = set(by_node) | {n for n, s in self.sessions.items() if s.partitions}
        out: list[ShareRecord] = []
        now_ms = self._now_ms()
        remaining = max(0, int((deadline - time.monotonic()) * 1000))
        wait = min(remaining, self.fetch_max_wait_ms, self.membership.ms_until_heartbeat(now_ms) if self.membership.state is MemberState.STABLE else remaining)
        for node in sorted(nodes):
            out.extend(self._share_fetch(node, by_node.get(node, set()), wait if len(nodes) == 1 else 0))
        return out

    def _share_fetch(self, node: int, assigned: set[TopicIdPartition], wait_ms: int) -> list[ShareRecord]:
        session = self.sessions.setdefault(node, ShareSession(node))
        version = self._share_version(node)
        node_acks = self.pending_acks.get(node, {})
        if session.epoch == INITIAL_EPOCH and not assigned:
            return []
        listed, forgotten = session.plan(assigned, node_acks)
        sent_acks = {tp: a for tp, a in listed.items() if a}
        renew = any(t == AcknowledgeType.RENEW for a in sent_acks.values() for t in a.values())
        cls = framing.request_schema(SHARE_FETCH, version)
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (tid, p), acks in sorted(listed.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            by_topic.setdefault(tid, []).append(payloads.build(
                payloads.nested(cls, "FetchPartition"),
                partition_index=p,
                partition_max_bytes=self.fetch_max_bytes,
                acknowledgement_batches=tuple(
                    payloads.build(payloads.nested(cls, "AcknowledgementBatch"), first_offset=b.first_offset, last_offset=b.last_offset, acknowledge_types=b.types)
                    for b in coalesce_acks(acks)
                ),
            ))
        forgotten_by_topic: dict[uuid.UUID, list[int]] = {}
        for tid, p in forgotten:
            forgotten_by_topic.setdefault(tid, []).append(p)
        fields = dict(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=session.epoch,
            # KIP-1222: a request carrying RENEW acknowledgements fetches nothing, and the
            # broker refuses it (INVALID_REQUEST) unless all the fetch limits are zero
            max_wait=_ms(0 if renew else wait_ms),
            min_bytes=0 if renew else 1,
            max_bytes=0 if renew else self.fetch_max_bytes,
            max_records=0 if renew else self.max_poll_records,
            batch_size=self.max_poll_records,
            share_acquire_mode=0,
            is_renew_ack=renew,
            topics=tuple(payloads.build(payloads.nested(cls, "FetchTopic"), topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=tuple(payloads.build(payloads.nested(cls, "ForgottenTopic"), topic_id=t, partitions=tuple(sorted(ps))) for t, ps in forgotten_by_topic.items()),
        )
        for tp in sent_acks:
            node_acks.pop(tp, None)
        if not node_acks:
            self.pending_acks.pop(node, None)
        try:
            resp = self._send(node, SHARE_FETCH, version, fields)
        except ConnectionError:
            session.reset()
            self._report_ack_results(node, sent_acks, {tp: (-1, "connection lost") for tp in sent_acks})
            return []
        top = int(resp.error_code)
        session.on_response(top)
        if top != NONE:
            self._report_ack_results(node, sent_acks, {tp: (top, resp.error_message) for tp in sent_acks})
            if top in FATAL_ERRORS:
                raise ShareFetchError("ShareFetch", top, resp.error_message)
            if top not in SESSION_ERRORS:
                time.sleep(0.05)
            return []
        self.acquisition_lock_timeout_ms = int(resp.acquisition_lock_timeout.total_seconds() * 1000)
        ack_errors: dict[TopicIdPartition, tuple[int, str | None]] = {}
        out: list[ShareRecord] = []
        refresh = False
        for t in resp.responses:
            name = self.topic_names.get(t.topic_id)
            for p in t.partitions:
                tp = (t.topic_id, int(p.partition_index))
                if tp in sent_acks:
                    ack_errors[tp] = (int(p.acknowledge_error_code), p.acknowledge_error_message)
                code = int(p.error_code)
                if code != NONE:
                    if code in METADATA_ERRORS:
                        refresh = True
                    if code in FATAL_ERRORS:
                        raise ShareFetchError("ShareFetch", code, p.error_message)
                    continue
                if name is None:
                    continue
                acquired = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in p.acquired_records]
                recs, gaps = acquired_share_records(name, tp[1], p.records, acquired, topic_id=t.topic_id, leader_id=node)
                out.extend(recs)
                for off in gaps:
                    self.pending_acks.setdefault(node, {}).setdefault(tp, {})[off] = int(AcknowledgeType.GAP)
        self._report_ack_results(node, sent_acks, ack_errors)
        if refresh:
            self._refresh_metadata()
        return out

    def _acknowledge_node(self, node: int, *, final: bool, only: set[TopicIdPartition] | None = None) -> dict[TopicPartition, Exception | None]:
        session = self.sessions.get(node)
        node_acks = self.pending_acks.get(node, {})
        sent = {tp: a for tp, a in node_acks.items() if a and (only is None or tp in only)}
        for tp in sent:
            node_acks.pop(tp, None)
        if not node_acks:
            self.pending_acks.pop(node, None)
        if session is None or not session.is_open:
            # No open session: acknowledgements cannot be sent (the broker released the
            # records when the session ended).
            return self._report_ack_results(node, sent, {tp: (SHARE_SESSION_NOT_FOUND, "no open share session") for tp in sent})
        if not sent and not final:
            return {}
        version = self._share_version(node)
        cls = framing.request_schema(SHARE_ACKNOWLEDGE, version)
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (tid, p), acks in sorted(sent.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            by_topic.setdefault(tid, []).append(payloads.build(
                payloads.nested(cls, "AcknowledgePartition"),
                partition_index=p,
                acknowledgement_batches=tuple(
                    payloads.build(payloads.nested(cls, "AcknowledgementBatch"), first_offset=b.first_offset, last_offset=b.last_offset, acknowledge_types=b.types)
                    for b in coalesce_acks(acks)
                ),
            ))
        renew = any(t == AcknowledgeType.RENEW for a in sent.values() for t in a.values())
        fields = dict(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=FINAL_EPOCH if final else session.epoch,
            is_renew_ack=renew,
            topics=tuple(payloads.build(payloads.nested(cls, "AcknowledgeTopic"), topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        try:
            resp = self._send(node, SHARE_ACKNOWLEDGE, version, fields)
        except ConnectionError:
            session.reset()
            return self._report_ack_results(node, sent, {tp: (-1, "connection lost") for tp in sent})
        top = int(resp.error_code)
        if final:
            session.close()
        else:
            session.on_acknowledge_response(top)
        if top != NONE:
            return self._report_ack_results(node, sent, {tp: (top, resp.error_message) for tp in sent})
        errors = {}
        for t in resp.responses:
            for p in t.partitions:
                errors[(t.topic_id, int(p.partition_index))] = (int(p.error_code), p.error_message)
        return self._report_ack_results(node, sent, errors)

    def _close_sessions(self) -> None:
        for node in set(self.pending_acks) | set(self.sessions):
            session = self.sessions.get(node)
            if session is not None and session.is_open:
                self._acknowledge_node(node, final=True)
            elif node in self.pending_acks:
                self._acknowledge_node(node, final=False)
        self._async_callbacks.clear()

    # -- I/O -------------------------------------------------------------------------------

    def _send(self, node: int, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        client: RawClient = self._cc.node(node)
        payload = payloads.build(framing.request_schema(api_key, version), **fields)
        started = time.monotonic()
        try:
            resp = client.send(payload)
        except (OSError, ConnectionClosed) as exc:
            self._drop_connection(node)
            self._record(API_NAMES.get(api_key, str(api_key)), api_key, version, node, _summarize(payload), {"error": repr(exc)}, time.monotonic() - started)
            raise ConnectionError(str(exc)) from exc
        self._record(API_NAMES.get(api_key, str(api_key)), api_key, version, node, _summarize(payload), _summarize(resp), time.monotonic() - started)
        return resp

    def _drop_connection(self, node: int) -> None:
        client = self._cc._clients.pop(node, None)
        if client is not None:
            client.close()

    def _record(self, api: str, api_key: int, version: int | None, node: int, request: Any, response: Any, elapsed_s: float) -> None:
        self._emit({
            "type": "request", "api": api, "api_key": api_key, "version": version, "node": node,
            "request": request, "response": response, "elapsed_ms": round(elapsed_s * 1000, 3),
        })

    def _emit(self, event: dict[str, Any]) -> None:
        event = {"ts": time.time(), "member_id": self.membership.member_id, **event}
        self.history.append(event)
        if self._hook is not None:
            self._hook(event)


def _ms(value: int) -> Any:
    return datetime.timedelta(milliseconds=max(0, int(value)))


__all__ = [
    "AckBatch",
    "AcknowledgeType",
    "AcknowledgementError",
    "FetchBuffer",
    "IllegalShareStateError",
    "InFlight",
    "ShareConsumer",
    "ShareConsumerError",
    "ShareFetchError",
    "ShareGroupError",
    "ShareRecord",
    "ShareSession",
    "UnsupportedShareVersionError",
    "acquired_share_records",
    "coalesce_acks",
    "expand_ack_batches",
    "next_session_epoch",
]
