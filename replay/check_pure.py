"""`kipcheck check` in plain Python: the same rules as replay.check_spark, row by row.

Small traces and the parity test use it; it builds the same normalized events per entity
(replay.check_events) and runs the same per-entity replays (replay.entity_replay),
the read_committed Fetch rules included (replay_fetch_partition).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import pyarrow as pa

from replay import check_events as ev
from replay import typed_fields
from replay.check_rules import requirements_of
from replay.entity_replay import REPLAYS, CheckConfig, Violation
from reference_impl.protocol.api_keys import ApiKey
from replay.trace_reader import upgrade


def _ok(r: dict) -> bool:
    return r["status"] == "ok" and not r["error_code"] and not r["error_codes"]


def _topic_ids(rows: Iterable[dict]) -> dict[str, str]:
    """Topic name -> topic id, from any partition entry that names both (the smallest id
    if a name had several, as the Spark path does)."""
    out: dict[str, str] = {}
    for r in rows:
        for p in r["partitions"] or ():
            if p["topic"] and p["topic_id"]:
                out[p["topic"]] = min(out.get(p["topic"], p["topic_id"]), p["topic_id"])
    return out


class Normalizer:
    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.name2id = _topic_ids(rows)

    def topic(self, name: str | None, tid: str | None) -> str | None:
        return tid or self.name2id.get(name or "", name)

    # -- transactions -----------------------------------------------------------------

    def txn_ordinals(self) -> dict[int, int]:
        """seq -> transaction ordinal of its transactional id (ok EndTxns before it)."""
        ordinal: dict[int, int] = {}
        ends: dict[str, int] = defaultdict(int)
        for r in sorted((r for r in self.rows if r["transactional_id"] is not None), key=lambda r: r["seq"]):
            ordinal[r["seq"]] = ends[r["transactional_id"]]
            if r["api_key"] == ApiKey.END_TXN and _ok(r):
                ends[r["transactional_id"]] += 1
        return ordinal

    def txn_events(self) -> list[dict]:
        out = []
        for r in self.rows:
            tid = r["transactional_id"]
            if tid is None or r["status"] != "ok" or not (r["api_key"] in ev.TXN_APIS or r["api_key"] == ApiKey.PRODUCE):
                continue
            gp = ge = None
            if r["api_key"] in (ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN):
                gp, ge = r["granted_producer_id"], r["granted_producer_epoch"]
            init = r["api_key"] == ApiKey.INIT_PRODUCER_ID
            out.append({"entity": tid, "seq": r["seq"], "api": r["api_key"], "t_req": r["request_mono_ns"],
                        "t_resp": r["response_mono_ns"], "pid": None if init else r["producer_id"],
                        "epoch": None if init else r["producer_epoch"], "grant_pid": gp, "grant_epoch": ge, "ok": _ok(r)})
        return out

    def group_events(self) -> list[dict]:
        out = []
        ordinal = self.txn_ordinals()
        groups_of_txn: dict[str, set[str]] = defaultdict(set)
        for r in self.rows:
            api, g = r["api_key"], r["group_id"]
            if r["status"] != "ok" or g is None:
                continue
            if api in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT) and _ok(r):
                kind, txn = "commit", None
                if api == ApiKey.TXN_OFFSET_COMMIT:
                    if r["transactional_id"] is None:
                        continue
                    kind, txn = "txn_commit", ev.txn_key(r["transactional_id"], ordinal[r["seq"]])
                    groups_of_txn[txn].add(g)
                for p in r["partitions"] or ():
                    if p["side"] == "request" and p["committed_offset"] is not None:
                        out.append({"entity": g, "seq": r["seq"], "kind": kind, "t": r["request_mono_ns"],
                                    "topic": self.topic(p["topic"], p["topic_id"]), "partition": p["partition"],
                                    "offset": p["committed_offset"], "txn": txn, "committed": None})
            elif api == ApiKey.OFFSET_FETCH:
                for p in r["partitions"] or ():
                    if p["side"] == "response" and p["committed_offset"] is not None and not p["error_code"]:
                        out.append({"entity": g, "seq": r["seq"], "kind": "fetch", "t": r["response_mono_ns"],
                                    "topic": self.topic(p["topic"], p["topic_id"]), "partition": p["partition"],
                                    "offset": p["committed_offset"], "txn": None, "committed": None})
        for r in self.rows:
            if r["api_key"] == ApiKey.END_TXN and r["transactional_id"] is not None and _ok(r):
                txn = ev.txn_key(r["transactional_id"], ordinal[r["seq"]])
                committed = bool(r["txn_committed"])
                for g in groups_of_txn.get(txn, ()):
                    out.append({"entity": g, "seq": r["seq"], "kind": "txn_end", "t": r["request_mono_ns"],
                                "topic": None, "partition": None, "offset": None, "txn": txn, "committed": committed})
        return out

    # -- share groups -----------------------------------------------------------------

    def share_events(self) -> list[dict]:
        """Share-group events; the entity is the group (replay_share_group keeps one view per
        share-partition and applies a session close to all of them)."""
        out = []
        for r in self.rows:
            api, g, m = r["api_key"], r["group_id"], r["member_id"]
            if api == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS and r["status"] == "ok" and g is not None:
                for tid, part, spso in ev.spso_reports(r["share_start_offsets"]):
                    out.append(self._share(g, r, "spso", tid, part, None, spso, spso, None, None))
                continue
            if api not in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) or r["status"] != "ok" or g is None or m is None:
                continue
            top_ok = not r["error_code"]
            for a in r["acknowledgement_batches"] or ():
                if a["side"] == "request":
                    out.append(self._share(g, r, "ack", a["topic_id"], a["partition"], m, a["first_offset"],
                                           a["last_offset"], None, list(a["acknowledge_types"])))
            if api == ApiKey.SHARE_FETCH and top_ok:
                for a in r["acquired_records"] or ():
                    out.append(self._share(g, r, "acq", a["topic_id"], a["partition"], m, a["first_offset"],
                                           a["last_offset"], a["delivery_count"], None))
            if r["share_session_epoch"] == -1 and top_ok:
                out.append(self._share(g, r, "close", None, None, m, None, None, None, None))
        return out

    @staticmethod
    def _share(group: str, r: dict, kind: str, tid: Any, part: Any, member: Any, first: Any, last: Any, count: Any,
               types: Any) -> dict:
        return {"entity": group, "seq": r["seq"], "kind": kind, "topic_id": tid, "partition": part, "member": member,
                "first": first, "last": last, "count": count, "types": types, "t_req": r["request_wall_ms"],
                "t_resp": r["response_wall_ms"], "ok": _ok(r)}

    def session_events(self) -> list[dict]:
        out = []
        for r in self.rows:
            if r["api_key"] not in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) or r["status"] != "ok":
                continue
            g, m, epoch = r["group_id"], r["member_id"], r["share_session_epoch"]
            if g is None or m is None or epoch is None:
                continue
            has_acks = any(a["side"] == "request" for a in r["acknowledgement_batches"] or ())
            out.append({"entity": ev.session_key(r["upstream"], g, m), "seq": r["seq"], "api": r["api_key"],
                        "group": g, "member": m, "epoch": epoch, "has_acks": has_acks,
                        "error": r["error_code"] or 0, "conn": r["connection_id"]})
        return out

    # -- row rules: read_committed fetches ---------------------------------------------

    def aborted_ranges(self) -> dict[tuple, list[tuple[int, int]]]:
        """(topic, partition, producer id) -> offset ranges of transactions that aborted."""
        ordinal = self.txn_ordinals()
        outcome: dict[str, bool] = {}
        for r in self.rows:
            if r["api_key"] == ApiKey.END_TXN and r["transactional_id"] is not None and _ok(r):
                outcome[ev.txn_key(r["transactional_id"], ordinal[r["seq"]])] = bool(r["txn_committed"])
        out: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for r in self.rows:
            if r["api_key"] != ApiKey.PRODUCE or r["transactional_id"] is None or r["status"] != "ok":
                continue
            if outcome.get(ev.txn_key(r["transactional_id"], ordinal[r["seq"]])) is not False:
                continue
            base = {(self.topic(p["topic"], p["topic_id"]), p["partition"]): p["base_offset"]
                    for p in r["partitions"] or () if p["side"] == "response" and not p["error_code"] and p["base_offset"] is not None}
            for b in r["batches"] or ():
                key = (self.topic(b["topic"], b["topic_id"]), b["partition"])
                if b["side"] == "request" and b["transactional"] and key in base and base[key] >= 0:
                    out[key + (b["producer_id"],)].append((base[key], base[key] + b["record_count"] - 1))
        return out

    def fetch_events(self) -> list[dict]:
        """Per fetched partition: the aborted ranges ("ab") and the batches of read_committed
        Fetch responses ("fb"), for replay.entity_replay.replay_fetch_partition."""
        out = [{"entity": f"{topic}-{part}", "seq": None, "kind": "ab", "pid": pid, "first": lo, "last": hi}
               for (topic, part, pid), ranges in self.aborted_ranges().items() for lo, hi in ranges]
        for r in self.rows:
            if r["api_key"] != ApiKey.FETCH or r["status"] != "ok" or r["isolation_level"] != ev.READ_COMMITTED:
                continue
            lso = {(self.topic(p["topic"], p["topic_id"]), p["partition"]): p["last_stable_offset"]
                   for p in r["partitions"] or () if p["side"] == "response"}
            listed = defaultdict(list)
            for a in r["aborted_transactions"] or ():
                listed[(self.topic(a["topic"], a["topic_id"]), a["partition"], a["producer_id"])].append(a["first_offset"])
            for b in r["batches"] or ():
                if b["side"] != "response":
                    continue
                key = (self.topic(b["topic"], b["topic_id"]), b["partition"])
                out.append({"entity": f"{key[0]}-{key[1]}", "seq": r["seq"], "kind": "fb", "pid": b["producer_id"],
                            "first": b["base_offset"], "last": b["last_offset"], "transactional": b["transactional"],
                            "control": b["control"], "lso": lso.get(key),
                            "listed": any(f <= b["base_offset"] for f in listed.get(key + (b["producer_id"],), ()))})
        return out


def exchange_rows(table: pa.Table) -> list[dict]:
    """The exchanges some rule reads, as dicts (a version-1 table is upgraded first)."""
    rows = upgrade(table).select(ev.COLUMNS).to_pylist()
    return [r for r in rows if r["kind"] == "exchange" and r["seq"] is not None and r["decode_error"] is None
            and ev.relevant(r["api_key"], r["transactional_id"], r["isolation_level"])]


def _group(events: list[dict]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by[e["entity"]].append(e)
    return by


def _typed(row: dict) -> dict:
    """A version-1 row (no schema_version, JSON columns present) with its typed columns
    derived from the JSON; exchange_rows' rows are already typed (and carry no JSON)."""
    if row.get("schema_version") is not None or "request_json" not in row:
        return row
    return {**row, **typed_fields.from_json(row["api_key"], row.get("request_json"), row.get("response_json"))}


def check_rows(rows: list[dict], cfg: CheckConfig | None = None) -> list[dict]:
    """Violations of every rule over already-read exchange rows (either schema version)."""
    cfg = cfg or CheckConfig()
    rows = [_typed(r) for r in rows]
    n = Normalizer(rows)
    found: list[Violation] = []
    for kind, events in (("fetch", n.fetch_events()), ("txn", n.txn_events()), ("group", n.group_events()),
                         ("share_group", n.share_events()), ("share_session", n.session_events())):
        for entity, evs in _group(events).items():
            found.extend(REPLAYS[kind](entity, evs, cfg))
    by_seq = {r["seq"]: r for r in rows}
    seen: set[tuple] = set()
    out = []
    for rule, entity, seq, detail in sorted(found, key=lambda v: (v[2], v[0], v[1])):
        if (rule, entity, seq) in seen:
            continue
        seen.add((rule, entity, seq))
        r = by_seq[seq]
        out.append({"rule_id": rule, "requirement_ids": requirements_of(rule), "entity": entity, "seq": seq,
                    "connection_id": r["connection_id"], "api_name": r["api_name"], "detail": detail})
    return out


def check_table(table: pa.Table, cfg: CheckConfig | None = None) -> list[dict]:
    return check_rows(exchange_rows(table), cfg)
