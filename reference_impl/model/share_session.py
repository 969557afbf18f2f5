"""Share sessions (KIP-932 "Share sessions"): the share-partition leader's session cache.

Pure model: no I/O; time comes in as `now_ms`. A share session is keyed by (group id,
member id) and holds the ordered set of share-partitions the member fetches, the
session epoch and the connection that opened it.

The epoch table (ShareFetch / ShareAcknowledge, field ShareSessionEpoch):

| request | epoch | meaning / errors |
|---|---|---|
| ShareFetch | 0 | full request: acknowledgements -> INVALID_REQUEST; an existing session for the key is discarded; a new session with epoch 1 is created, or SHARE_SESSION_LIMIT_REACHED when the cache is full |
| ShareFetch | 1..MAX | incremental: no session -> SHARE_SESSION_NOT_FOUND; epoch != session epoch -> INVALID_SHARE_SESSION_EPOCH; else partitions added/forgotten, epoch + 1 (wraps to 1) |
| ShareFetch | -1 | final: no session -> SHARE_SESSION_NOT_FOUND; acknowledgements applied, the member's acquired records released, the session closed |
| ShareAcknowledge | 0 | INVALID_SHARE_SESSION_EPOCH |
| ShareAcknowledge | 1..MAX | as the incremental ShareFetch, epoch + 1 |
| ShareAcknowledge | -1 | no session -> SHARE_SESSION_NOT_FOUND; no epoch check; acknowledgements applied, the session closed |

Where Kafka 4.x (ShareSessionCache, SharePartitionManager.newContext /
acknowledgeSessionUpdate) differs from the KIP text, this follows Kafka:

* Limit: `group.share.max.share.sessions` (default 2000) caps the number of sessions on a
  broker (the KIP: group.share.max.groups x group.share.max.size). A full cache refuses
  a new session with SHARE_SESSION_LIMIT_REACHED (Kafka 4.1+; 4.0 answered
  SHARE_SESSION_NOT_FOUND).
* Eviction: Kafka 4.1+ never evicts for inactivity; a session ends with a final epoch,
  with a new epoch-0 request for the same key, or when the connection that created it
  closes. The KIP's (and Kafka 4.0's) "evict a session idle for more than 120 s when the
  cache is full" is available with `eviction_ms=120_000`.
* Final ShareFetch: the KIP refuses partitions to add or forget with INVALID_REQUEST.
  Kafka 4.4.0 (observed) accepts them, fetches nothing and closes the session;
  `kip_final_epoch_checks=True` gives the KIP's check.
* Replacing a session (epoch 0 while one is open): the KIP releases the old session's
  acquired records; Kafka (observed on 4.4.0) only drops the session and the records
  stay acquired until their locks expire. The share-partition manager decides
  (`release_on_session_replace`).
* Connection tracking: each connection remembers the key of the last session it
  created (Kafka's connectionIdToSessionMap holds one key per connection). Closing that
  connection closes that session if it still exists.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable

from kio.schema.errors import ErrorCode

from reference_impl.model import seeded_bugs as bugs
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
DEFAULT_MAX_SHARE_SESSIONS = 2000  # group.share.max.share.sessions
KIP_EVICTION_MS = 120_000  # the KIP's inactivity eviction (Kafka 4.0 only)


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch: -1 stays -1, MAX wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch >= MAX_EPOCH:
        return 1
    return epoch + 1


@dataclass(frozen=True, slots=True, order=True)
class ShareSessionKey:
    group_id: str
    member_id: str


# A share-partition in a session: (topic id, partition). Topic ids are uuid.UUID.
PartitionKey = tuple[Any, int]


@dataclass(slots=True)
class ShareSession:
    key: ShareSessionKey
    partitions: "OrderedDict[PartitionKey, None]"
    epoch: int
    connection_id: Hashable | None
    created_ms: int
    last_used_ms: int

    def update(self, add: Iterable[PartitionKey], forget: Iterable[PartitionKey]) -> tuple[list, list, list]:
        """Apply an incremental request: (added, updated, removed)."""
        added, updated, removed = [], [], []
        for p in add:
            if p in self.partitions:
                updated.append(p)
            else:
                self.partitions[p] = None
                added.append(p)
        for p in forget:
            if self.partitions.pop(p, 0) is None:
                removed.append(p)
        return added, updated, removed

    def rotate(self, first: PartitionKey) -> None:
        """Fair rotation: the next fetch starts after `first` (Kafka rotates the partition
        order between fetches so that one partition cannot starve the others)."""
        if first in self.partitions:
            self.partitions.move_to_end(first)


class ShareSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class FetchContext:
    """What a ShareFetch request does with its session."""

    kind: str  # "full" (epoch 0) | "incremental" | "final" (epoch -1)
    session: ShareSession | None
    replaced: ShareSession | None = None  # a session discarded by a new epoch-0 request
    partitions: list[PartitionKey] = field(default_factory=list)  # what to fetch, in order


class ShareSessionCache:
    """The share sessions of one broker (share-partition leader)."""

    def __init__(
        self, max_entries: int = DEFAULT_MAX_SHARE_SESSIONS, *, eviction_ms: int | None = None,
        kip_final_epoch_checks: bool = False, seeded_bugs: SeededBugs = NO_BUGS,
    ) -> None:
        if max_entries < 0:
            raise ValueError("group.share.max.share.sessions must be >= 0")
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.kip_final_epoch_checks = kip_final_epoch_checks
        self.seeded_bugs = seeded_bugs  # reference:bug=NAME (seeded_bugs.py)
        self._sessions: dict[ShareSessionKey, ShareSession] = {}
        self._by_connection: dict[Hashable, ShareSessionKey] = {}
        self.evictions = 0

    # -- queries ---------------------------------------------------------------------

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get(ShareSessionKey(group_id, member_id))

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: ShareSessionKey) -> bool:
        return key in self._sessions

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def members_of(self, group_id: str) -> list[str]:
        return [k.member_id for k in self._sessions if k.group_id == group_id]

    # -- changes ---------------------------------------------------------------------

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop(ShareSessionKey(group_id, member_id), None)

    def _try_evict(self, now_ms: int) -> bool:
        if self.eviction_ms is None or not self._sessions:
            return False
        oldest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.key))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            del self._sessions[oldest.key]
            self.evictions += 1
            return True
        return False

    def maybe_create(
        self, group_id: str, member_id: str, partitions: Iterable[PartitionKey], connection_id: Hashable | None, now_ms: int
    ) -> ShareSession | None:
        """A new session with epoch 1, or None when the cache is full."""
        cap = self.max_entries // 2 if self.seeded_bugs.has(bugs.SHARE_SESSION_CAP_HALVED) else self.max_entries
        if len(self._sessions) >= cap and not self._try_evict(now_ms):
            return None
        key = ShareSessionKey(group_id, member_id)
        session = ShareSession(key, OrderedDict((p, None) for p in partitions), next_epoch(INITIAL_EPOCH),
                               connection_id, now_ms, now_ms)
        self._sessions[key] = session
        if connection_id is not None:
            self._by_connection[connection_id] = key
        return session

    def on_disconnect(self, connection_id: Hashable) -> ShareSession | None:
        """The connection closed: remove the last session it created, if still present."""
        key = self._by_connection.pop(connection_id, None)
        if key is None:
            return None
        session = self._sessions.pop(key, None)
        if session is not None:
            self.evictions += 1
        return session

    # -- the epoch table -------------------------------------------------------------

    def new_fetch_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        partitions: Iterable[PartitionKey],
        forgotten: Iterable[PartitionKey],
        *,
        has_acknowledgements: bool,
        connection_id: Hashable | None,
        now_ms: int,
    ) -> FetchContext:
        """Kafka's SharePartitionManager.newContext; raises ShareSessionError."""
        partitions = list(dict.fromkeys(partitions))
        forgotten = list(forgotten)
        key = ShareSessionKey(group_id, member_id)
        if epoch == FINAL_EPOCH:
            if self.kip_final_epoch_checks and (partitions or forgotten):
                raise ShareSessionError(ErrorCode.invalid_request, "A final ShareFetch cannot fetch or forget partitions.")
            session = self._sessions.get(key)
            if session is None:
                raise ShareSessionError(ErrorCode.share_session_not_found, f"No share session for {member_id}.")
            return FetchContext("final", session)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements and not self.seeded_bugs.has(bugs.SHARE_INITIAL_FETCH_ACKS_ACCEPTED):
                raise ShareSessionError(ErrorCode.invalid_request, "An initial ShareFetch cannot carry acknowledgements.")
            replaced = self._sessions.pop(key, None)
            session = self.maybe_create(group_id, member_id, partitions, connection_id, now_ms)
            if session is None:
                raise ShareSessionError(ErrorCode.share_session_limit_reached, "The share session cache is full.")
            return FetchContext("full", session, replaced, list(session.partitions))
        if epoch < FINAL_EPOCH:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch, f"Invalid share session epoch {epoch}.")
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found, f"No share session for {member_id}.")
        if session.epoch != epoch and not self.seeded_bugs.has(bugs.SHARE_SESSION_EPOCH_UNCHECKED):
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch, f"Expected share session epoch {session.epoch}, got {epoch}."
            )
        session.update(partitions, forgotten)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        return FetchContext("incremental", session, None, list(session.partitions))

    def acknowledge_session_update(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession:
        """Kafka's acknowledgeSessionUpdate (ShareAcknowledge); raises ShareSessionError.
        A final epoch (-1) is not epoch-checked; the caller closes the session."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session.")
        session = self._sessions.get(ShareSessionKey(group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found, f"No share session for {member_id}.")
        if epoch == FINAL_EPOCH:
            return session
        if session.epoch != epoch and not self.seeded_bugs.has(bugs.SHARE_SESSION_EPOCH_UNCHECKED):
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch, f"Expected share session epoch {session.epoch}, got {epoch}."
            )
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        return session


__all__ = [
    "DEFAULT_MAX_SHARE_SESSIONS",
    "FINAL_EPOCH",
    "FetchContext",
    "INITIAL_EPOCH",
    "KIP_EVICTION_MS",
    "MAX_EPOCH",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionError",
    "ShareSessionKey",
    "next_epoch",
]
