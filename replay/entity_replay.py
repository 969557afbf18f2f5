"""Per-entity replay of the reference state machines over a trace (no I/O, no Spark).

`kipcheck check` groups normalized trace events by entity and runs one of these functions
per entity: from Spark through `applyInArrow` (replay.check_spark) and directly in the
pure-Python checker (replay.check_pure). Each takes the entity key and its events (dicts,
any order: they are sorted here) and returns violations ``(rule_id, entity, seq, detail)``.

The models keep what the reference keeps and answer what the reference would answer:

* transactional id: granted producer id/epoch per id (InitProducerId, EndTxn v5+ bump,
  KIP-890), and which requests the coordinator/leader must fence from then on (the rule
  itself is ``checkers.fencing``, shared with the chaos copier's checker);
* group offsets: which offsets are visible to OffsetFetch at a time (plain commits at once,
  transactional ones from their EndTxn(commit), never after an abort);
* share group, per share-partition (the KIP-932 rules themselves are
  ``rules.share``, shared with the chaos share-group checker): per record holder member, lock window (request/response wall times plus
  the lock duration), delivery count, final (Acknowledged/Archived) state, a start offset
  below which everything is final, and the reported SPSO;
* fetched partition: the aborted transactions' offset ranges, against which each
  read_committed Fetch batch is judged (with the response's LSO and aborted list);
* share session: the reference `ShareSessionCache` (the KIP's epoch table as Kafka
  implements it) replayed per (broker, group, member).

A trace may start in the middle of things: what the model has not seen (a record never
acquired in the trace, a session opened before it) is never flagged, only learnt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from rules import fencing
from rules import share as rules
from reference_impl.model.share_session import ShareSessionCache, ShareSessionError
from reference_impl.protocol.api_keys import ApiKey
from kio.schema.errors import ErrorCode

Violation = tuple[str, str, int, str]


@dataclass(frozen=True)
class CheckConfig:
    lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = rules.DEFAULT_DELIVERY_LIMIT  # group.share.delivery.count.limit


def _v(x: Any) -> Any:
    """None for SQL nulls coming through pandas (NaN / pd.NA / NaT)."""
    if x is None:
        return None
    try:
        if x != x:  # NaN
            return None
    except (TypeError, ValueError):
        return x
    return x


def _int(x: Any) -> int | None:
    x = _v(x)
    return None if x is None else int(x)


# ----------------------------------------------------------------------------- transactions


def replay_transactional_id(entity: str, events: Iterable[dict], cfg: CheckConfig | None = None) -> list[Violation]:
    """Events: seq, api, t_req, t_resp, pid, epoch, grant_pid, grant_epoch, ok.

    TXN.FENCED_SUCCEEDED is the chaos fencing rule (``rules.fencing.fenced_ok``)
    over (producer id, epoch) holders; the events are its trace->history adapter."""
    out: list[Violation] = []
    granted: dict[int, int] = {}  # producer id -> highest epoch granted
    steps: list[fencing.Grant | fencing.Use] = []
    for e in sorted(events, key=lambda e: int(e["seq"])):
        seq, api, ok = int(e["seq"]), int(e["api"]), bool(e["ok"])
        pid, epoch = _int(e.get("pid")), _int(e.get("epoch"))
        if api != ApiKey.INIT_PRODUCER_ID and pid is not None and pid >= 0 and epoch is not None:
            steps.append(fencing.Use((pid, epoch), int(e["t_req"]), ok, (seq, api)))
        gpid, gepoch = _int(e.get("grant_pid")), _int(e.get("grant_epoch"))
        if ok and gpid is not None and gpid >= 0 and gepoch is not None and gepoch >= 0:
            prev = granted.get(gpid)
            regressed = prev is not None and (gepoch <= prev if api == ApiKey.INIT_PRODUCER_ID else gepoch < prev)
            if regressed:
                out.append(("TXN.EPOCH_REGRESSED", entity, seq,
                            f"api {api} granted producer {gpid} epoch {gepoch} after epoch {prev}"))
            granted[gpid] = max(gepoch, prev if prev is not None else gepoch)
            steps.append(fencing.Grant((gpid, granted[gpid]), int(e["t_resp"])))
    for use, grant in fencing.fenced_ok(steps, fencing.epoch_supersedes):
        (seq, api), (pid, epoch), (cur_pid, cur_epoch) = use.ref, use.holder, grant.holder
        if pid == cur_pid:
            detail = f"api {api} with producer {pid} epoch {epoch} succeeded after epoch {cur_epoch} was granted"
        else:
            detail = f"api {api} with old producer id {pid} succeeded after producer id {cur_pid} was granted"
        out.append(("TXN.FENCED_SUCCEEDED", entity, seq, detail))
    return sorted(out, key=lambda v: (v[2], v[0] != "TXN.FENCED_SUCCEEDED"))


# ----------------------------------------------------------------------------- group offsets

_GROUP_ORDER = {"commit": 0, "txn_end": 0, "txn_commit": 1, "fetch": 2}


def replay_group_offsets(entity: str, events: Iterable[dict], cfg: CheckConfig | None = None) -> list[Violation]:
    """Events: seq, kind (commit | txn_commit | txn_end | fetch), t, topic, partition, offset,
    txn (transactional id + transaction ordinal), committed (txn_end)."""
    out: list[Violation] = []
    visible: dict[tuple, set[int]] = {}
    staged: dict[tuple, set[int]] = {}  # every value a transaction staged, per partition
    pending: dict[str, list[tuple[tuple, int]]] = {}
    evs = sorted(events, key=lambda e: (int(e["t"]), _GROUP_ORDER[e["kind"]], int(e["seq"])))
    for e in evs:
        kind = e["kind"]
        if kind == "txn_end":
            values = pending.pop(e["txn"], [])
            if bool(e["committed"]):
                for tp, off in values:
                    visible.setdefault(tp, set()).add(off)
            continue
        tp, off = (e["topic"], int(e["partition"])), int(e["offset"])
        if kind == "commit":
            visible.setdefault(tp, set()).add(off)
        elif kind == "txn_commit":
            pending.setdefault(e["txn"], []).append((tp, off))
            staged.setdefault(tp, set()).add(off)
        elif off >= 0 and off in staged.get(tp, ()) and off not in visible.get(tp, ()):
            out.append(("TXN.OFFSETS_BEFORE_MARKER", entity, int(e["seq"]),
                        f"OffsetFetch returned {tp[0]}-{tp[1]} offset {off} of a transaction not committed yet"))
    return out


# ----------------------------------------------------------------------------- fetched partitions


def replay_fetch_partition(entity: str, events: Iterable[dict], cfg: CheckConfig | None = None) -> list[Violation]:
    """Events of one partition ("topic-partition") as read_committed consumers saw it:
    kind "ab" (an aborted transaction's data: pid, first..last offsets) and kind "fb" (a
    read_committed Fetch response batch: seq, pid, first = base offset, last, transactional,
    control, lso = the same response's last stable offset, listed = an aborted_transactions
    entry of the same producer id with first offset <= the batch's base offset).

    KIP-98: a read_committed Fetch never returns data at/after the LSO (FETCH.BEYOND_LSO),
    and every aborted batch it returns comes with the entry that lets the client drop it
    (FETCH.ABORTED_UNLISTED). The aborted ranges are the whole trace's, in any order."""
    evs = list(events)
    aborted: dict[int, list[tuple[int, int]]] = {}
    for e in evs:
        if e["kind"] == "ab":
            aborted.setdefault(int(e["pid"]), []).append((int(e["first"]), int(e["last"])))
    out: list[Violation] = []
    for e in sorted((e for e in evs if e["kind"] == "fb"), key=lambda e: int(e["seq"])):
        seq, base, last, lso = int(e["seq"]), int(e["first"]), int(e["last"]), _int(e.get("lso"))
        if lso is not None and lso >= 0 and last >= lso:
            out.append(("FETCH.BEYOND_LSO", entity, seq, f"batch {base}-{last} at/after LSO {lso}"))
        if not bool(_v(e["transactional"])) or bool(_v(e["control"])) or bool(_v(e["listed"])):
            continue
        pid = int(e["pid"])
        if any(lo <= last and base <= hi for lo, hi in aborted.get(pid, ())):
            out.append(("FETCH.ABORTED_UNLISTED", entity, seq, f"aborted batch {base}-{last} of producer {pid} not listed"))
    return out


# ----------------------------------------------------------------------------- share-partition

_SHARE_ORDER = {"ack": 0, "close": 1, "acq": 2, "spso": 3}


class _Record:
    __slots__ = ("holder", "t_req", "t_resp", "count", "final")

    def __init__(self, holder: str | None, t_req: int, t_resp: int, count: int) -> None:
        self.holder, self.t_req, self.t_resp, self.count, self.final = holder, t_req, t_resp, count, False


class SharePartitionView:
    """What the trace shows of one share-partition's in-flight records."""

    def __init__(self, entity: str, cfg: CheckConfig) -> None:
        self.entity, self.cfg = entity, cfg
        self.records: dict[int, _Record] = {}
        self.held: dict[str, set[int]] = {}
        self.start: int | None = None  # every offset below it is final (the model's SPSO)
        self.reported_spso: int | None = None
        self.out: list[Violation] = []

    def _flag(self, rule: str, seq: int, detail: str) -> None:
        self.out.append((rule, self.entity, seq, detail))

    def _release(self, member: str, offset: int) -> None:
        s = self.held.get(member)
        if s is not None:
            s.discard(offset)

    def acquire(self, seq: int, member: str, first: int, last: int, count: int, t_req: int, t_resp: int) -> None:
        found: dict[str, str] = {}
        if rules.delivery_count_problem(count, self.cfg.delivery_count_limit) == "above-limit":
            found["SHARE.DELIVERY_COUNT"] = f"offsets {first}-{last} delivered with count {count} > limit {self.cfg.delivery_count_limit}"
        if self.start is None:
            self.start = first
        for o in range(first, last + 1):
            r = self.records.get(o)
            if o < self.start:
                found.setdefault("SHARE.REDELIVERED_FINAL", f"offset {o} is below the start offset {self.start}")
                continue
            if r is not None:
                if r.final:
                    found.setdefault("SHARE.REDELIVERED_FINAL", f"offset {o} was accepted or rejected before")
                elif r.holder is not None and r.holder != member and rules.lock_surely_held(
                        r.t_req, t_resp, self.cfg.lock_duration_ms):
                    found.setdefault("SHARE.DOUBLE_ACQUIRE", f"offset {o} is held by {r.holder} (lock from {r.t_req})")
                if rules.delivery_count_problem(count, float("inf"), r.count) == "decrease":
                    found.setdefault("SHARE.DELIVERY_COUNT", f"offset {o} delivery count {count} after {r.count}")
                if r.holder is not None:
                    self._release(r.holder, o)
                r.holder, r.t_req, r.t_resp, r.count, r.final = member, t_req, t_resp, count, False
            else:
                self.records[o] = _Record(member, t_req, t_resp, count)
            self.held.setdefault(member, set()).add(o)
        for rule, detail in found.items():
            self._flag(rule, seq, detail)

    def acknowledge(self, seq: int, member: str, first: int, last: int, types: list[int], t_req: int) -> None:
        bad: str | None = None
        for o in range(first, last + 1):
            t = int(types[0] if len(types) == 1 else types[o - first])
            r = self.records.get(o)
            if r is None:
                continue  # never seen acquired in this trace: nothing to say
            if bad is None:
                if r.final:
                    bad = f"offset {o} was already acknowledged"
                elif r.holder != member:
                    bad = f"offset {o} is held by {r.holder}, not {member}"
                elif rules.lock_surely_expired(r.t_resp, t_req, self.cfg.lock_duration_ms):
                    bad = f"offset {o}: lock expired (acquired by {t_req - r.t_resp} ms before the ack)"
            if rules.renews(t):
                r.t_req = r.t_resp = t_req
                continue
            if r.holder is not None:
                self._release(r.holder, o)
            r.holder = None
            r.final = rules.settles(t)
        if bad is not None:
            self._flag("SHARE.ACK_NOT_HELD", seq, bad)
        self._advance()

    def close(self, member: str) -> None:
        for o in self.held.pop(member, set()):
            r = self.records.get(o)
            if r is not None and r.holder == member:
                r.holder = None

    def report_spso(self, seq: int, spso: int) -> None:
        if rules.spso_regressed(self.reported_spso, spso):
            self._flag("SHARE.SPSO_REGRESSED", seq, f"start offset {spso} after {self.reported_spso}")
        self.reported_spso = spso if self.reported_spso is None else max(spso, self.reported_spso)

    def _advance(self) -> None:
        """Forget the final prefix (it becomes `start`), as the SPSO moves."""
        if self.start is None:
            return
        while True:
            r = self.records.get(self.start)
            if r is None or not r.final:
                return
            del self.records[self.start]
            self.start += 1


def replay_share_group(entity: str, events: Iterable[dict], cfg: CheckConfig | None = None) -> list[Violation]:
    """Events of one share group: seq, kind (acq | ack | close | spso), topic_id, partition,
    member, first, last, count, types, t_req, t_resp, ok. One SharePartitionView per
    share-partition; a close (session ended) releases the member's records in all of them.
    Violations name the share-partition ("group|topic id|partition")."""
    cfg = cfg or CheckConfig()
    views: dict[tuple, SharePartitionView] = {}

    def view(e: dict) -> SharePartitionView:
        key = (e["topic_id"], int(e["partition"]))
        v = views.get(key)
        if v is None:
            v = views[key] = SharePartitionView(f"{entity}|{key[0]}|{key[1]}", cfg)
        return v

    for e in sorted(events, key=lambda e: (int(e["seq"]), _SHARE_ORDER[e["kind"]])):
        kind, seq = e["kind"], int(e["seq"])
        if kind == "acq":
            view(e).acquire(seq, e["member"], int(e["first"]), int(e["last"]), int(e["count"]), int(e["t_req"]), int(e["t_resp"]))
        elif kind == "ack":
            if bool(e["ok"]):
                view(e).acknowledge(seq, e["member"], int(e["first"]), int(e["last"]), [int(x) for x in e["types"]], int(e["t_req"]))
        elif kind == "close":
            for v in views.values():
                v.close(e["member"])
        elif kind == "spso":
            view(e).report_spso(seq, int(e["first"]))
    return [x for v in views.values() for x in v.out]


# ----------------------------------------------------------------------------- share sessions


def replay_share_session(entity: str, events: Iterable[dict], cfg: CheckConfig | None = None) -> list[Violation]:
    """Events: seq, api (78 | 79), group, member, epoch, has_acks, error, conn.

    The reference cache decides what each request should get. Until the trace shows the
    session being opened (epoch 0) the model learns from the answers instead of judging.
    A session-not-found on another connection than the one that opened the session is
    believed (Kafka closes a session when its connection closes; closes are not traced).
    """
    out: list[Violation] = []
    cache = ShareSessionCache(max_entries=1 << 30)
    known = False  # the session's opening is in the trace
    opened_on: Any = None
    for e in sorted(events, key=lambda e: int(e["seq"])):
        seq, api, epoch = int(e["seq"]), int(e["api"]), int(e["epoch"])
        group, member, conn = e["group"], e["member"], _v(e.get("conn"))
        observed = _int(e.get("error")) or 0
        if observed not in (0, ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch):
            continue  # answered by something the epoch table does not decide
        expected = 0
        try:
            if api == ApiKey.SHARE_FETCH:
                cache.new_fetch_context(group, member, epoch, [], [], has_acknowledgements=bool(e["has_acks"]),
                                        connection_id=conn, now_ms=0)
            else:
                cache.acknowledge_session_update(group, member, epoch, 0)
        except ShareSessionError as err:
            expected = int(err.code)
        if epoch == -1 and expected == 0:
            cache.remove(group, member)
        if expected == observed:
            if api == ApiKey.SHARE_FETCH and epoch == 0 and observed == 0:
                known, opened_on = True, conn
            continue
        if observed != 0:
            moved = opened_on is not None and conn != opened_on and observed == ErrorCode.share_session_not_found
            if known and expected == 0 and not moved:
                out.append(("SHARE.SESSION_EPOCH", entity, seq,
                            f"api {api} epoch {epoch}: broker answered error {observed}, the epoch table says success"))
            cache.remove(group, member)  # the broker holds no session we know the epoch of
            known = False
            continue
        # observed success where the model expected an error
        if known or epoch == 0:  # epoch 0 is decided without any session state
            out.append(("SHARE.SESSION_EPOCH", entity, seq,
                        f"api {api} epoch {epoch}: broker answered success, the epoch table says error {expected}"))
            known = False  # model and broker disagree: learn the broker's epoch again
        if epoch > 0:  # learn the broker's epoch
            cache.remove(group, member)
            s = cache.maybe_create(group, member, [], conn, 0)
            if s is not None:
                s.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        elif epoch == -1:
            cache.remove(group, member)
        elif epoch == 0:  # a session was opened although the table refuses it
            cache.remove(group, member)
            cache.maybe_create(group, member, [], conn, 0)
            known, opened_on = True, conn
    return out


REPLAYS = {
    "txn": replay_transactional_id,
    "group": replay_group_offsets,
    "share_group": replay_share_group,
    "share_session": replay_share_session,
    "fetch": replay_fetch_partition,
}
