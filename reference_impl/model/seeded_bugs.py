"""Deliberate, documented bugs the reference broker can be started with (issue 14, item 6).

A conformance suite is only evidence if it can fail. `reference:bug=NAME[,NAME]` starts a
reference broker with the named semantic violations switched on; `conformance.power` runs
the tests tagged with each bug's catalog ids against it and demands that at least one fails
(mutation testing at the level of protocol semantics, in the spirit of Jepsen's
deliberately broken databases).

Each bug is one `if bugs.has(NAME)` at the exact decision point of the model (or, for the
ShareFetch acknowledge/fetch order, of the handler that owns that order). The registry is
pure data; `SeededBugs` is the typed set carried by BrokerConfig and the per-aggregate
config objects (SharePartitionConfig, TransactionConfig, LogConfig). An empty set is the
plain reference: no hook fires.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SeededBug:
    """One deliberate violation: its spec name, the catalog ids it breaks, what it does."""

    name: str
    requirement_ids: tuple[str, ...]
    description: str
    kip: str
    # Target options the tests that can see the bug need (e.g. "authorizer=standard").
    target_options: tuple[str, ...] = ()

    @property
    def target_spec(self) -> str:
        """The broken broker's target spec, as `kipcheck power` runs it."""
        return ":".join(("reference", *self.target_options, f"bug={self.name}"))


def _bug(name: str, kip: str, ids: tuple[str, ...], description: str, *, options: tuple[str, ...] = ()) -> SeededBug:
    return SeededBug(name, ids, description, kip, options)


# -- KIP-932: share-partition leader ---------------------------------------------------------------
SHARE_ACKS_NOT_APPLIED = "share-acks-not-applied"
SHARE_ACKS_AFTER_FETCH = "share-acks-after-fetch"
SHARE_DELIVERY_COUNT_FROZEN = "share-delivery-count-frozen"
SHARE_LOCKS_NEVER_EXPIRE = "share-locks-never-expire"
SHARE_REJECT_AS_RELEASE = "share-reject-as-release"
SHARE_RELEASE_AS_ACCEPT = "share-release-as-accept"
SHARE_DELIVERY_LIMIT_IGNORED = "share-delivery-limit-ignored"
SHARE_SPSO_FROZEN = "share-spso-frozen"
SHARE_FOREIGN_ACK_ACCEPTED = "share-foreign-ack-accepted"
SHARE_ACKS_NOT_ATOMIC = "share-acks-not-atomic"
SHARE_READ_COMMITTED_DELIVERS_ABORTED = "share-read-committed-delivers-aborted"
SHARE_READ_COMMITTED_PAST_LSO = "share-read-committed-past-lso"
# -- KIP-932: share sessions and the share group coordinator ----------------------------------------
SHARE_SESSION_EPOCH_UNCHECKED = "share-session-epoch-unchecked"
SHARE_INITIAL_FETCH_ACKS_ACCEPTED = "share-initial-fetch-acks-accepted"
SHARE_STALE_MEMBER_EPOCH_ACCEPTED = "share-stale-member-epoch-accepted"
SHARE_GROUP_EPOCH_NOT_BUMPED = "share-group-epoch-not-bumped"
SHARE_GROUP_SIZE_UNBOUNDED = "share-group-size-unbounded"
SHARE_SESSION_CAP_HALVED = "share-session-cap-halved"
SHARE_ASSIGNOR_NOT_STICKY = "share-assignor-not-sticky"
# -- KIP-932: retention, lock expiry, acknowledgement errors, share coordinator (issue 25) ----------
SHARE_OVERTAKEN_RECORDS_REDELIVERED = "share-overtaken-records-redelivered"
SHARE_LOCK_EXPIRY_NOT_PERSISTED = "share-lock-expiry-not-persisted"
SHARE_EXPIRED_ACK_ACCEPTED = "share-expired-ack-accepted"
SHARE_ACK_ERRORS_NOT_PER_PARTITION = "share-ack-errors-not-per-partition"
SHARE_STALE_STATE_EPOCH_WRITE_ACCEPTED = "share-stale-state-epoch-write-accepted"
SHARE_STALE_LEADER_EPOCH_WRITE_ACCEPTED = "share-stale-leader-epoch-write-accepted"
# -- KIP-98: partition leader --------------------------------------------------------------------
IDEMPOTENT_DUPLICATE_APPENDED = "idempotent-duplicate-appended"
IDEMPOTENT_WINDOW_UNBOUNDED = "idempotent-window-unbounded"
OUT_OF_ORDER_SEQUENCE_ACCEPTED = "out-of-order-sequence-accepted"
FENCED_PRODUCE_EPOCH_ACCEPTED = "fenced-produce-epoch-accepted"
OPEN_TXN_NOT_HOLDING_LSO = "open-txn-not-holding-lso"
READ_COMMITTED_READS_UNCOMMITTED = "read-committed-reads-uncommitted"
ABORTED_TXNS_MISSING_FROM_FETCH = "aborted-txns-missing-from-fetch"
LIST_OFFSETS_COMMITTED_RETURNS_HW = "list-offsets-committed-returns-hw"
ABORTED_TXN_BEFORE_FETCH_UNLISTED = "aborted-txn-before-fetch-unlisted"
WRITE_TXN_MARKERS_TOPIC_WRITE_SUFFICES = "write-txn-markers-topic-write-suffices"
# -- KIP-98: transaction coordinator -------------------------------------------------------------
ABORT_MARKER_WRITTEN_AS_COMMIT = "abort-marker-written-as-commit"
INIT_PRODUCER_ID_EPOCH_NOT_BUMPED = "init-producer-id-epoch-not-bumped"
TXN_TIMEOUT_NEVER_ABORTS = "txn-timeout-never-aborts"
UNADDED_PARTITION_PRODUCE_ACCEPTED = "unadded-partition-produce-accepted"
LOADED_PREPARE_COMMIT_ABORTED = "loaded-prepare-commit-aborted"
# -- KIP-98 / KIP-447: group coordinator ---------------------------------------------------------
TXN_OFFSETS_VISIBLE_BEFORE_COMMIT = "txn-offsets-visible-before-commit"
TXN_OFFSET_STALE_PRODUCER_EPOCH_ACCEPTED = "txn-offset-stale-producer-epoch-accepted"
TXN_OFFSET_STALE_GENERATION_ACCEPTED = "txn-offset-stale-generation-accepted"
REQUIRE_STABLE_IGNORED = "require-stable-ignored"
TXN_OFFSET_ABORT_DROPS_OTHER_PRODUCERS = "txn-offset-abort-drops-other-producers"
# -- protocol ------------------------------------------------------------------------------------
OFFSET_FETCH_MISSING_IS_ZERO = "offset-fetch-missing-is-zero"
FETCH_PAST_END_NO_ERROR = "fetch-past-end-no-error"
CRC_NOT_CHECKED = "crc-not-checked"
# -- KIP-1289 and the draft round-trip KIP (issue 25) ------------------------------------------------
TXN_SHARE_STAGING_EPOCH_UNCHECKED = "txn-share-staging-epoch-unchecked"
TXN_SHARE_PENDING_PERSISTED = "txn-share-pending-persisted"
TXN_SHARE_REJECT_COMMITTED_AS_ACCEPT = "txn-share-reject-committed-as-accept"
TXN_SHARE_ACK_ACL_UNCHECKED = "txn-share-ack-acl-unchecked"
TXN_SHARE_MARKERS_BROADCAST = "txn-share-markers-broadcast"
TXNRT_HOLD_ONLY_AFTER_COMMIT = "txnrt-hold-only-after-commit"
# -- KIP-848: consumer groups of the new protocol (reference_impl/model/consumer_group.py) -----------
TXN_OFFSET_COMMIT_MEMBER_EPOCH_UNCHECKED = "txn-offset-commit-member-epoch-unchecked"
OFFSET_COMMIT_STALE_MEMBER_EPOCH_ACCEPTED = "offset-commit-stale-member-epoch-accepted"
CONSUMER_GROUP_NO_REVOCATION_BEFORE_REASSIGN = "consumer-group-no-revocation-before-reassign"
TXN_OFFSET_COMMIT_UNKNOWN_MEMBER_ACCEPTED = "txn-offset-commit-unknown-member-accepted"
CONSUMER_GROUP_ACTIVE_INSTANCE_ID_TAKEN = "consumer-group-active-instance-id-taken"
CONSUMER_GROUP_REBALANCE_TIMEOUT_IGNORED = "consumer-group-rebalance-timeout-ignored"
TXN_OFFSET_COMMIT_REVOKING_PARTITION_REFUSED = "txn-offset-commit-revoking-partition-refused"
MEMBER_OFFSET_FETCH_IGNORES_REQUIRE_STABLE = "member-offset-fetch-ignores-require-stable"
CONSUMER_GROUP_TAKES_SHARE_GROUP_ID = "consumer-group-takes-share-group-id"
CLASSIC_JOIN_TAKES_CONSUMER_GROUP = "classic-join-takes-consumer-group"
# -- caught only under faults (kipcheck chaos; chaos/tests/test_broken_reference.py) -----------------
TXN_COMMIT_ABORTED_ON_DOWN_REPLICA = "txn-commit-aborted-on-down-replica"
SHARE_LEADER_MOVE_FORGETS_STATE = "share-leader-move-forgets-state"

BUGS: tuple[SeededBug, ...] = (
    _bug(SHARE_ACKS_NOT_APPLIED, "KIP-932",
         ("KIP-932.STATE.005", "KIP-932.STATE.006", "KIP-932.STATE.008", "KIP-932.FETCH.004", "KIP-932.SESSION.011",
          "KIP-932.CLIENT.004", "KIP-932.STATE.011"),
         "ShareFetch/ShareAcknowledge acknowledgements are answered with success but never change a record's state"),
    _bug(SHARE_ACKS_AFTER_FETCH, "KIP-932", ("KIP-932.FETCH.004",),
         "acknowledgements piggy-backed on a ShareFetch are applied after its fetch instead of before"),
    _bug(SHARE_DELIVERY_COUNT_FROZEN, "KIP-932",
         ("KIP-932.DELIVERY.001", "KIP-932.DELIVERY.003", "KIP-932.STATE.007"),
         "every acquisition sets the delivery count to 1 instead of incrementing it"),
    _bug(SHARE_LOCKS_NEVER_EXPIRE, "KIP-932", ("KIP-932.LOCK.001",),
         "acquisition locks never expire: an unacknowledged record stays Acquired forever"),
    _bug(SHARE_REJECT_AS_RELEASE, "KIP-932", ("KIP-932.STATE.008",),
         "REJECT makes the record Available again (as RELEASE) instead of archiving it"),
    _bug(SHARE_RELEASE_AS_ACCEPT, "KIP-932", ("KIP-932.STATE.006",),
         "RELEASE acknowledges the record (as ACCEPT) instead of making it Available"),
    _bug(SHARE_DELIVERY_LIMIT_IGNORED, "KIP-932", ("KIP-932.STATE.007", "KIP-932.DELIVERY.001"),
         "the delivery count limit is never enforced: released or expired records are always redelivered"),
    _bug(SHARE_SPSO_FROZEN, "KIP-932", ("KIP-932.STATE.010", "KIP-932.STATE.009"),
         "the share-partition start offset never advances past acknowledged records"),
    _bug(SHARE_FOREIGN_ACK_ACCEPTED, "KIP-932", ("KIP-932.ACK.002",),
         "a member may acknowledge records acquired by another member"),
    _bug(SHARE_ACKS_NOT_ATOMIC, "KIP-932", ("KIP-932.ACK.003",),
         "a partition's acknowledgement batches before a failing one stay applied (no all-or-nothing)"),
    _bug(SHARE_READ_COMMITTED_DELIVERS_ABORTED, "KIP-932", ("KIP-932.TXN.003",),
         "a read_committed share group delivers records of aborted transactions"),
    _bug(SHARE_READ_COMMITTED_PAST_LSO, "KIP-932", ("KIP-932.TXN.004",),
         "a read_committed share group acquires records past the LSO (open transactions)"),
    _bug(SHARE_SESSION_EPOCH_UNCHECKED, "KIP-932", ("KIP-932.SESSION.005",),
         "an incremental ShareFetch/ShareAcknowledge with the wrong session epoch is served"),
    _bug(SHARE_INITIAL_FETCH_ACKS_ACCEPTED, "KIP-932", ("KIP-932.SESSION.002",),
         "a session-opening ShareFetch (epoch 0) carrying acknowledgements is accepted"),
    _bug(SHARE_STALE_MEMBER_EPOCH_ACCEPTED, "KIP-932", ("KIP-932.HB.007",),
         "ShareGroupHeartbeat accepts a member epoch the member never had (no FENCED_MEMBER_EPOCH)"),
    _bug(SHARE_GROUP_EPOCH_NOT_BUMPED, "KIP-932", ("KIP-932.EPOCH.001", "KIP-932.EPOCH.002"),
         "the share group epoch does not increase on a subscription change"),
    _bug(SHARE_GROUP_SIZE_UNBOUNDED, "KIP-932", ("KIP-932.CONFIG.007",),
         "group.share.max.size is not enforced: a join beyond the cap is accepted (no GROUP_MAX_SIZE_REACHED)"),
    _bug(SHARE_SESSION_CAP_HALVED, "KIP-932", ("KIP-932.SESSION.015",),
         "the share session cache refuses new sessions at half of group.share.max.share.sessions"),
    _bug(SHARE_ASSIGNOR_NOT_STICKY, "KIP-932", ("KIP-932.ASSIGN.007",),
         "the simple assignor ignores the current assignment: a member joining moves existing members' partitions"),
    _bug(SHARE_OVERTAKEN_RECORDS_REDELIVERED, "KIP-932", ("KIP-932.SPSO.006",),
         "in-flight records overtaken by a new log start offset stay in the window: released, they are redelivered"),
    _bug(SHARE_LOCK_EXPIRY_NOT_PERSISTED, "KIP-932", ("KIP-932.LOCK.004",),
         "a lock expiry changes the in-memory state only: the share coordinator never learns of it"),
    _bug(SHARE_EXPIRED_ACK_ACCEPTED, "KIP-932", ("KIP-932.LOCK.002", "KIP-932.CLIENT.006"),
         "acknowledging a record whose lock expired (Available again) is accepted as if it were still held"),
    _bug(SHARE_ACK_ERRORS_NOT_PER_PARTITION, "KIP-932", ("KIP-932.ACK.005",),
         "one partition's acknowledgement error is answered for every partition of the ShareAcknowledge"),
    _bug(SHARE_STALE_STATE_EPOCH_WRITE_ACCEPTED, "KIP-932", ("KIP-932.PERSIST.001",),
         "WriteShareGroupState with a state epoch older than the stored one is applied (no FENCED_STATE_EPOCH)"),
    _bug(SHARE_STALE_LEADER_EPOCH_WRITE_ACCEPTED, "KIP-932", ("KIP-932.PERSIST.002",),
         "WriteShareGroupState with a leader epoch older than the stored one is applied (no FENCED_LEADER_EPOCH)"),
    _bug(IDEMPOTENT_DUPLICATE_APPENDED, "KIP-98", ("KIP-98.IDEMP.004", "KIP-98.IDEMP.006"),
         "a retried idempotent batch (same producer, epoch and sequences) is appended a second time"),
    _bug(IDEMPOTENT_WINDOW_UNBOUNDED, "KIP-98", ("KIP-98.IDEMP.004",),
         "a retry of an idempotent batch older than the producer's last 5 is answered "
         "DUPLICATE_SEQUENCE_NUMBER instead of OUT_OF_ORDER_SEQUENCE_NUMBER (no bounded window)"),
    _bug(OUT_OF_ORDER_SEQUENCE_ACCEPTED, "KIP-98", ("KIP-98.IDEMP.005", "KIP-98.IDEMP.003"),
         "a batch whose sequence skips ahead is appended instead of OUT_OF_ORDER_SEQUENCE_NUMBER"),
    _bug(FENCED_PRODUCE_EPOCH_ACCEPTED, "KIP-98", ("KIP-98.FENCE.003",),
         "Produce with a producer epoch older than the partition's current one is appended"),
    _bug(OPEN_TXN_NOT_HOLDING_LSO, "KIP-98", ("KIP-98.LSO.001", "KIP-98.LSO.002", "KIP-98.LSO.003"),
         "open transactions do not hold the last stable offset: the LSO is the high watermark"),
    _bug(READ_COMMITTED_READS_UNCOMMITTED, "KIP-98", ("KIP-98.LSO.002", "KIP-98.FETCH.003"),
         "read_committed fetches are served up to the high watermark, as read_uncommitted"),
    _bug(ABORTED_TXNS_MISSING_FROM_FETCH, "KIP-98", ("KIP-98.FETCH.002", "KIP-98.FETCH.003"),
         "read_committed fetch responses carry no aborted transactions"),
    _bug(LIST_OFFSETS_COMMITTED_RETURNS_HW, "KIP-98", ("KIP-98.LSO.004",),
         "ListOffsets latest at read_committed answers the high watermark instead of the LSO"),
    _bug(ABORTED_TXN_BEFORE_FETCH_UNLISTED, "KIP-98", ("KIP-98.FETCH.002", "KIP-98.TXN.003"),
         "a read_committed fetch lists only the aborted transactions that start at or after its fetch "
         "offset: a fetch starting inside an aborted transaction returns its records as committed"),
    _bug(WRITE_TXN_MARKERS_TOPIC_WRITE_SUFFICES, "KIP-98", ("KIP-98.AUTH.003",),
         "WriteTxnMarkers from a principal holding WRITE on every topic it names is processed without "
         "CLUSTER_ACTION: any producer may commit or abort other producers' transactions",
         options=("authorizer=standard",)),
    _bug(ABORT_MARKER_WRITTEN_AS_COMMIT, "KIP-98", ("KIP-98.MARKER.001", "KIP-98.TXN.003", "KIP-98.ENDTXN.001"),
         "the coordinator writes COMMIT markers for aborted transactions"),
    _bug(INIT_PRODUCER_ID_EPOCH_NOT_BUMPED, "KIP-98", ("KIP-98.INIT.001", "KIP-98.FENCE.001"),
         "InitProducerId for a known transactional id keeps the producer epoch (no fencing)"),
    _bug(TXN_TIMEOUT_NEVER_ABORTS, "KIP-98", ("KIP-98.TIMEOUT.001",),
         "transactions past their timeout are never aborted by the coordinator"),
    _bug(UNADDED_PARTITION_PRODUCE_ACCEPTED, "KIP-98", ("KIP-98.TXN.006",),
         "the leader appends TV1 transactional data for a partition the transaction never added (no "
         "KIP-890 verification): no marker ever ends it and the partition's LSO hangs"),
    _bug(LOADED_PREPARE_COMMIT_ABORTED, "KIP-98", ("KIP-98.COORD.004",),
         "a coordinator loading the transaction log aborts the transactions it finds in PrepareCommit "
         "instead of finishing their commit", options=("nodes=3",)),
    _bug(TXN_OFFSETS_VISIBLE_BEFORE_COMMIT, "KIP-98", ("KIP-98.TXNOFF.001", "KIP-98.TXN.002"),
         "TxnOffsetCommit offsets become committed at once, before the transaction's marker"),
    _bug(TXN_OFFSET_STALE_PRODUCER_EPOCH_ACCEPTED, "KIP-98", ("KIP-98.TXNOFF.002",),
         "TxnOffsetCommit from an older producer epoch is stored"),
    _bug(TXN_OFFSET_STALE_GENERATION_ACCEPTED, "KIP-447", ("KIP-447.FENCE.002",),
         "TxnOffsetCommit with a stale group generation is accepted (no zombie fencing)"),
    _bug(REQUIRE_STABLE_IGNORED, "KIP-447", ("KIP-447.FETCH.001",),
         "OffsetFetch with require_stable returns offsets while transactional offsets are pending"),
    _bug(TXN_OFFSET_ABORT_DROPS_OTHER_PRODUCERS, "KIP-447", ("KIP-447.FETCH.008",),
         "an abort marker of one producer drops the pending transactional offsets of every producer of "
         "the group, not only its own"),
    _bug(OFFSET_FETCH_MISSING_IS_ZERO, "protocol", ("PROTO.GROUP.002",),
         "OffsetFetch answers 0 instead of -1 for a partition without a committed offset"),
    _bug(FETCH_PAST_END_NO_ERROR, "protocol", ("PROTO.FETCH.002",),
         "Fetch beyond the log end offset answers no records instead of OFFSET_OUT_OF_RANGE"),
    _bug(CRC_NOT_CHECKED, "protocol", ("PROTO.BAD.001",),
         "a produced batch with a wrong CRC is appended instead of CORRUPT_MESSAGE"),
    _bug(TXN_SHARE_STAGING_EPOCH_UNCHECKED, "KIP-1289", ("KIP-1289.FENCE.001", "KIP-1289.CASE.003"),
         "TxnShareAcknowledge skips the coordinator registration when the transactional id's open "
         "transaction already has the share-state partition and the producer id matches: a zombie's "
         "older epoch stages, and the new instance's commit resolves it"),
    _bug(TXN_SHARE_PENDING_PERSISTED, "KIP-1289", ("KIP-1289.CASE.001",),
         "TX_PENDING records are written to the share coordinator as pending whenever the partition's "
         "state is persisted: after a leader crash they reload stranded, never delivered again"),
    _bug(TXN_SHARE_REJECT_COMMITTED_AS_ACCEPT, "KIP-1289", ("KIP-1289.STATE.003",),
         "a commit marker makes staged REJECT records Acknowledged instead of Archived"),
    _bug(TXN_SHARE_ACK_ACL_UNCHECKED, "KIP-1289", ("KIP-1289.ACL.001",),
         "TxnShareAcknowledge checks only WRITE on the transactional id: a producer without READ on the "
         "share group or its topics stages, and so commits away, that group's records",
         options=("authorizer=standard",)),
    _bug(TXN_SHARE_MARKERS_BROADCAST, "KIP-1289", ("KIP-1289.MARKER.003",),
         "every transaction marker is offered to every share-partition of the cluster: a WriteTxnMarkers "
         "at a broker that leads none of them resolves stagings there (only 2+ brokers show it)",
         options=("nodes=3",)),
    _bug(TXNRT_HOLD_ONLY_AFTER_COMMIT, "KIP-TXNRT", ("KIP-TXNRT.BLOCK.001",),
         "the draft's blocking add waits only for a previous commit's markers: after an abort it answers "
         "CONCURRENT_TRANSACTIONS at once"),
    _bug(TXN_OFFSET_COMMIT_MEMBER_EPOCH_UNCHECKED, "KIP-848", ("KIP-848.FENCE.001",),
         "TxnOffsetCommit to a consumer-protocol group checks the member id but not its epoch: a zombie's "
         "stale-epoch transactional offsets are stored"),
    _bug(OFFSET_COMMIT_STALE_MEMBER_EPOCH_ACCEPTED, "KIP-848", ("KIP-848.FENCE.002",),
         "OffsetCommit v9+ to a consumer-protocol group accepts a member epoch older than the member's "
         "(no STALE_MEMBER_EPOCH)"),
    _bug(CONSUMER_GROUP_NO_REVOCATION_BEFORE_REASSIGN, "KIP-848", ("KIP-848.RECONCILE.001",),
         "a partition taken from one consumer-group member is handed to its new owner at once, before the "
         "old owner acknowledged the revocation"),
    _bug(TXN_OFFSET_COMMIT_UNKNOWN_MEMBER_ACCEPTED, "KIP-848", ("KIP-848.FENCE.003",),
         "TxnOffsetCommit to a consumer-protocol group naming a member id the group does not have is "
         "stored (no UNKNOWN_MEMBER_ID)"),
    _bug(CONSUMER_GROUP_ACTIVE_INSTANCE_ID_TAKEN, "KIP-848", ("KIP-848.FENCE.004",),
         "a ConsumerGroupHeartbeat join with the instance id of an active static member replaces that "
         "member at once (no UNRELEASED_INSTANCE_ID)"),
    _bug(CONSUMER_GROUP_REBALANCE_TIMEOUT_IGNORED, "KIP-848", ("KIP-848.ZOMBIE.001",),
         "a member that does not revoke within its rebalance timeout stays in the consumer group (only "
         "its session timeout removes it): its partitions are not reassigned, its commits not fenced"),
    _bug(TXN_OFFSET_COMMIT_REVOKING_PARTITION_REFUSED, "KIP-848", ("KIP-848.TXN.001",),
         "TxnOffsetCommit with the member's current epoch for a partition it is revoking (still owned) "
         "is refused with ILLEGAL_GENERATION: the old owner cannot finish its transaction"),
    _bug(MEMBER_OFFSET_FETCH_IGNORES_REQUIRE_STABLE, "KIP-848", ("KIP-848.TXN.002",),
         "OffsetFetch v9+ naming a consumer-group member ignores RequireStable: pending transactional "
         "offsets are answered as committed ones instead of UNSTABLE_OFFSET_COMMIT"),
    _bug(CONSUMER_GROUP_TAKES_SHARE_GROUP_ID, "KIP-848", ("KIP-848.TYPES.001",),
         "a ConsumerGroupHeartbeat join with a share group's id creates a consumer group of that id "
         "(no GROUP_ID_NOT_FOUND)"),
    _bug(CLASSIC_JOIN_TAKES_CONSUMER_GROUP, "KIP-848", ("KIP-848.TYPES.003",),
         "the broker declares group.consumer.migration.policy=disabled, yet a classic JoinGroup into a "
         "non-empty consumer group replaces that group and is admitted (no INCONSISTENT_GROUP_PROTOCOL)"),
    _bug(TXN_COMMIT_ABORTED_ON_DOWN_REPLICA, "KIP-98", ("KIP-98.TXN.001",),
         "while a replica of a participant partition is down, a committing transaction gets an ABORT "
         "marker there: the commit lands on only some partitions (only a run with node faults sees it)"),
    _bug(SHARE_LEADER_MOVE_FORGETS_STATE, "KIP-932", ("KIP-932.STATE.005", "KIP-932.STATE.008"),
         "when a share-partition's leader goes down, the next leader ignores the persisted state and "
         "starts again from share.auto.offset.reset: acquired and acknowledged records come back "
         "(only a run with node faults sees it)"),
)

BY_NAME: dict[str, SeededBug] = {b.name: b for b in BUGS}
CHAOS_ONLY: frozenset[str] = frozenset({TXN_COMMIT_ABORTED_ON_DOWN_REPLICA, SHARE_LEADER_MOVE_FORGETS_STATE})
"""Bugs only a run with faults can see (judged by `kipcheck chaos`, chaos/tests); the calm
power matrix leaves them out unless named."""


@dataclass(frozen=True, slots=True)
class SeededBugs:
    """The set of seeded bugs one broker runs with (empty: the plain reference)."""

    names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.names - BY_NAME.keys())
        if unknown:
            raise ValueError(f"unknown seeded bug(s) {', '.join(unknown)}; known: {', '.join(sorted(BY_NAME))}")

    @classmethod
    def parse(cls, text: str | None) -> "SeededBugs":
        """`NAME[,NAME...]` as written after `bug=` in a target spec (None/empty: no bug)."""
        names = frozenset(n.strip() for n in (text or "").split(",") if n.strip())
        if text is not None and not names:
            raise ValueError(f"bug= needs at least one name; known: {', '.join(sorted(BY_NAME))}")
        return cls(names)

    def has(self, name: str) -> bool:
        return name in self.names

    def __bool__(self) -> bool:
        return bool(self.names)


NO_BUGS = SeededBugs()
