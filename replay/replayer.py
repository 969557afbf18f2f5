"""Replay a recorded trace against a target and record the target's answers as a new trace.

Order. Each recorded connection is replayed by one worker thread, request after request
in recorded request order (a Kafka broker handles one request of a connection at a time,
so this keeps the per-connection semantics). Across connections a request waits until
every exchange of another connection whose response was *recorded before this request
was read* has been replayed (happens-before by the proxy's monotonic clock: the client
may have acted on that response). Those dependencies always point to earlier request
times, so the waits cannot cycle. Requests whose recorded times overlap run concurrently.

Identifiers. `id_remap.IdRemap` learns recorded -> target identifiers from each pair of
responses and rewrites later requests; unchanged requests are sent byte for byte.

Routing. Partition requests go to the target's leader of their first partition, group
and transaction requests to the target's coordinator of their key (found with the
replayer's own FindCoordinator), everything else to the target node standing for the
recorded broker (same node id if the target has it). Replayer-issued lookups are control
traffic: counted in the report, not written to the trace.

Retries. When the target answers with a retriable error (coordinator moved/loading, leader
moved, topic not yet propagated, concurrent transactions) that the recorded response did
not have, the request is retried (bounded, with backoff); every retry is listed in the
report and only the final attempt is written to the trace.

Output. A normal trace directory (same schema, `replay.trace_writer.TraceWriter`): each row
keeps the recorded `seq`, `connection_id` and `correlation_id`, so a diff can align the
two traces; `listener` is "replay" and `upstream` the target node. Nothing is skipped
silently: every recorded exchange not replayed is counted by reason in
`replay_report.json` (gap rows of the recorded trace included).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_impl.client.raw_client import ClusterClient, ConnectionClosed, RawClient
from reference_impl.protocol import framing
from replay import trace_schema as ts
from replay.id_remap import IdRemap, canonical
from replay.trace_reader import read_trace
from replay.trace_writer import RawExchange, TraceWriter, api_name
from kio.schema.errors import ErrorCode
from reference_impl.protocol.api_keys import ApiKey

log = logging.getLogger("kipcheck.replay")

REPORT_FILE = "replay_report.json"
API_VERSIONS = 18
SASL_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
RETRIABLE = {e: e.name.upper() for e in (
    ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available, ErrorCode.not_leader_or_follower,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions, ErrorCode.unknown_topic_id)}
ROUTE_INVALIDATING = {ErrorCode.leader_not_available, ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator}
PARTITION_APIS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.DELETE_RECORDS,
                            ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})
GROUP_APIS = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT,
                        ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.TXN_OFFSET_COMMIT,
                        ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                        ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE})
# (InitProducerId joins these when it carries a transactional id)
TXN_APIS = frozenset({ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN})
CONTROL_TIMEOUT_S = 15.0


class ReplayError(Exception):
    """The replay cannot start or cannot go on (trace unreadable, target unreachable)."""


# --- the recorded side ---------------------------------------------------------------------


@dataclass
class Recorded:
    """One exchange row of the recorded trace, with what the replay needs."""

    seq: int
    connection_id: int
    api_key: int
    api_version: int
    correlation_id: int
    status: str
    upstream: str | None
    request_mono_ns: int
    response_mono_ns: int | None
    request_bytes: bytes | None
    response_bytes: bytes | None
    decode_error: str | None
    request: framing.DecodedRequest | None = None
    skip_reason: str | None = None  # known before the replay starts
    deps: list[tuple[int, int]] = field(default_factory=list)  # (connection id, exchanges done there)

    @property
    def name(self) -> str:
        return api_name(self.api_key, self.api_version) or f"api_{self.api_key}"

    @property
    def done_ns(self) -> int:
        """When the client could act on this exchange in the recording."""
        return self.response_mono_ns if self.response_mono_ns is not None else self.request_mono_ns


@dataclass
class Plan:
    connections: dict[int, list[Recorded]]
    gaps: list[tuple[int, str]]  # (count, reason) of recorded gap rows
    payloads: str
    broker_nodes: dict[str, int]  # recorded upstream host:port -> recorded node id
    total: int


_COLUMNS = ["kind", "seq", "connection_id", "api_key", "api_version", "correlation_id", "status", "upstream",
            "request_mono_ns", "response_mono_ns", "request_bytes", "response_bytes", "decode_error", "payloads",
            "gap_count", "gap_reason"]


def static_skip_reason(x: Recorded) -> str | None:
    """Why an exchange cannot be replayed whatever the target is (None: it can)."""
    if x.api_key in SASL_KEYS:
        return "SASL exchange: credentials are never stored in a trace"
    if x.status == ts.STATUS_CONNECTION_CLOSED:
        return "recorded connection closed before the response: no recorded outcome to compare"
    if x.request_bytes is None:
        return "request frame not stored in the trace"
    if x.request is None:
        return f"request does not decode: {x.decode_error or 'unknown api/version'}"
    return None


def plan_trace(rows: list[dict]) -> Plan:
    """Group exchanges by connection in request order and compute cross-connection
    happens-before dependencies (pure: no I/O)."""
    conns: dict[int, list[Recorded]] = collections.defaultdict(list)
    gaps: list[tuple[int, str]] = []
    modes = collections.Counter()
    broker_nodes: dict[str, int] = {}
    total = 0
    for r in rows:
        if r["kind"] == ts.KIND_GAP:
            gaps.append((int(r["gap_count"] or 0), r["gap_reason"] or "gap"))
            continue
        total += 1
        modes[r["payloads"]] += 1
        x = Recorded(int(r["seq"]), int(r["connection_id"]), int(r["api_key"]), int(r["api_version"]),
                     int(r["correlation_id"]), r["status"], r["upstream"], int(r["request_mono_ns"]),
                     r["response_mono_ns"], r["request_bytes"], r["response_bytes"], r["decode_error"])
        if x.request_bytes is not None and x.api_key not in SASL_KEYS:
            try:
                x.request = framing.decode_request(x.request_bytes, strict=False)
            except Exception as exc:  # noqa: BLE001 - reported as the skip reason
                x.decode_error = x.decode_error or str(exc)
        x.skip_reason = static_skip_reason(x)
        if x.api_key == ApiKey.METADATA and x.response_bytes and x.upstream:
            _learn_brokers(x, broker_nodes)
        conns[x.connection_id].append(x)
    for items in conns.values():
        items.sort(key=lambda x: (x.request_mono_ns, x.seq))
    _dependencies(conns)
    payload_mode = modes.most_common(1)[0][0] if modes else "keep"
    return Plan(dict(conns), gaps, payload_mode or "keep", broker_nodes, total)


def _learn_brokers(x: Recorded, into: dict[str, int]) -> None:
    try:
        body = framing.decode_response_frame(x.response_bytes, x.api_key, x.api_version).body
    except Exception:  # noqa: BLE001 - routing falls back to the first node
        return
    for b in body.brokers:
        into.setdefault(f"{b.host}:{int(b.port)}", int(b.node_id))


def _dependencies(conns: dict[int, list[Recorded]]) -> None:
    """x waits, on every other connection C, for the longest prefix of C that contains
    every exchange C finished (recorded) before x's request was read."""
    index: dict[int, tuple[list[int], list[int]]] = {}
    for cid, items in conns.items():
        order = sorted(range(len(items)), key=lambda i: items[i].done_ns)
        times = [items[i].done_ns for i in order]
        need, best = [], 0
        for i in order:
            best = max(best, i + 1)
            need.append(best)
        index[cid] = (times, need)
    for cid, items in conns.items():
        for x in items:
            for other, (times, need) in index.items():
                if other == cid:
                    continue
                k = bisect.bisect_left(times, x.request_mono_ns)
                if k:
                    x.deps.append((other, need[k - 1]))


# --- routing on the target --------------------------------------------------------------------


def _canonical_fields(e: Any) -> dict[str, Any]:
    return {canonical(f.name): getattr(e, f.name) for f in dataclasses.fields(e)}


def request_partitions(body: Any) -> list[tuple[str | None, uuid.UUID | None, int]]:
    """(topic name, topic id, partition) of every partition a request names, in order."""
    out: list[tuple[str | None, uuid.UUID | None, int]] = []
    stack = [(body, None, None)]
    while stack:
        e, name, tid = stack.pop(0)
        f = _canonical_fields(e)
        cname = type(e).__name__
        for n in ("topic", "topic_name", "name"):
            if isinstance(f.get(n), str) and (n != "name" or "Topic" in cname):
                name = f[n]
                break
        if isinstance(f.get("topic_id"), uuid.UUID) and f["topic_id"].int:
            tid = f["topic_id"]
        found = False
        for n in ("partition_index", "partition", "index"):
            if isinstance(f.get(n), int) and (n != "index" or "Partition" in cname) and (name or tid):
                out.append((name, tid, int(f[n])))
                found = True
                break
        if found:
            continue
        for v in f.values():
            if isinstance(v, tuple):
                stack.extend((c, name, tid) for c in v if dataclasses.is_dataclass(c))
            elif dataclasses.is_dataclass(v):
                stack.append((v, name, tid))
    return out


def first_partition(body: Any) -> tuple[str | None, uuid.UUID | None, int | None]:
    """(topic name, topic id, partition) of the first partition a request names."""
    parts = request_partitions(body)
    return parts[0] if parts else (None, None, None)


def coordinator_key(api_key: int, body: Any) -> tuple[int, str] | None:
    """(key type, key) of the coordinator a request must reach: 0 group, 1 transaction."""
    f = _canonical_fields(body)
    if api_key in TXN_APIS or api_key == ApiKey.INIT_PRODUCER_ID:
        tid = f.get("transactional_id")
        if tid is None and f.get("transactions"):
            tid = f["transactions"][0].transactional_id
        return (1, tid) if tid else None
    if api_key in GROUP_APIS:
        group = f.get("group_id")
        if group is None:
            for n in ("groups", "group_ids", "groups_names"):
                v = f.get(n)
                if v:
                    group = v[0] if isinstance(v[0], str) else getattr(v[0], "group_id", None)
                    break
        return (0, group) if group else None
    return None


# request (topics field, partitions field) and response (topics field, partitions field) of
# the partition requests that can be split per leader (ShareFetch/ShareAcknowledge cannot:
# a share session lives on one broker)
SPLIT_FIELDS = {0: ("topic_data", "partition_data"), 1: ("topics", "partitions"), 2: ("topics", "partitions"),
                21: ("topics", "partitions"), 23: ("topics", "partitions")}
MERGE_FIELDS = {0: ("responses", "partition_responses"), 1: ("responses", "partitions"), 2: ("topics", "partitions"),
                21: ("topics", "partitions"), 23: ("topics", "partitions")}


def topic_key(topic: Any) -> tuple[str | None, uuid.UUID | None]:
    f = _canonical_fields(topic)
    name = next((f[n] for n in ("name", "topic") if isinstance(f.get(n), str) and f[n]), None)
    tid = f.get("topic_id") if isinstance(f.get("topic_id"), uuid.UUID) and f["topic_id"].int else None
    return name, tid


def partition_index(p: Any) -> int:
    f = _canonical_fields(p)
    return int(next(f[n] for n in ("partition_index", "partition", "index") if isinstance(f.get(n), int)))


def split_request(api_key: int, body: Any, node_of) -> dict[int, Any] | None:
    """The request's partitions grouped by `node_of(topic, partition)`, as one sub-request
    per node (other fields kept; Fetch's forgotten topics ride with the first). None when a
    partition's node is unknown."""
    tf, pf = SPLIT_FIELDS[api_key]
    groups: dict[int, list[Any]] = {}
    for topic in getattr(body, tf):
        per_node: dict[int, list[Any]] = {}
        for p in getattr(topic, pf):
            node = node_of(topic, partition_index(p))
            if node is None:
                return None
            per_node.setdefault(node, []).append(p)
        for node, ps in per_node.items():
            groups.setdefault(node, []).append(dataclasses.replace(topic, **{pf: tuple(ps)}))
    out = {}
    for i, (node, topics) in enumerate(groups.items()):
        changes: dict[str, Any] = {tf: tuple(topics)}
        if i and getattr(body, "forgotten_topics_data", None):
            changes["forgotten_topics_data"] = ()
        out[node] = dataclasses.replace(body, **changes)
    return out


def merge_responses(api_key: int, bodies: list[Any], request: Any) -> Any:
    """One response from the sub-responses, topics and partitions in the request's order;
    throttle time the largest, a top-level error the first non-zero, node endpoints united."""
    tf, pf = MERGE_FIELDS[api_key]
    rtf, rpf = SPLIT_FIELDS[api_key]
    order: dict[tuple, int] = {}
    for topic in getattr(request, rtf):
        for p in getattr(topic, rpf):
            order.setdefault((topic_key(topic), partition_index(p)), len(order))
    merged: dict[tuple, Any] = {}
    for b in bodies:
        for topic in getattr(b, tf):
            k = topic_key(topic)
            if k in merged:
                topic = dataclasses.replace(merged[k], **{pf: getattr(merged[k], pf) + getattr(topic, pf)})
            merged[k] = topic
    big = len(order)

    def rank(k: tuple, p: Any) -> int:
        return order.get((k, partition_index(p)), big)

    topics = []
    for k, topic in merged.items():
        parts = tuple(sorted(getattr(topic, pf), key=lambda p: rank(k, p)))
        topics.append(dataclasses.replace(topic, **{pf: parts}))
    topics.sort(key=lambda t: min((rank(topic_key(t), p) for p in getattr(t, pf)), default=big))
    base = bodies[0]
    changes: dict[str, Any] = {tf: tuple(topics)}
    if hasattr(base, "throttle_time"):
        changes["throttle_time"] = max(b.throttle_time for b in bodies)
    if hasattr(base, "error_code"):
        changes["error_code"] = next((b.error_code for b in bodies if int(b.error_code)), base.error_code)
    if getattr(base, "node_endpoints", None) is not None:
        seen: dict[int, Any] = {}
        for b in bodies:
            for ep in b.node_endpoints or ():
                seen.setdefault(int(ep.node_id), ep)
        changes["node_endpoints"] = tuple(seen.values())
    return dataclasses.replace(base, **changes)


class TargetRouter:
    """Target nodes, partition leaders and coordinators, from the replayer's own lookups."""

    def __init__(self, bootstrap: str, timeout: float = CONTROL_TIMEOUT_S) -> None:
        try:
            self.cc = ClusterClient(bootstrap, client_id="kipcheck-replay", timeout=timeout)
        except Exception as exc:
            raise ReplayError(f"target {bootstrap} unreachable: {exc}") from exc
        self.api_versions = self.cc.bootstrap.api_versions()
        self.lock = threading.Lock()
        self.leaders: dict[tuple[str, int], int] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.coordinators: dict[tuple[int, str], int] = {}
        self.control_requests = collections.Counter()

    @property
    def nodes(self) -> dict[int, tuple[str, int]]:
        return self.cc.nodes

    def supports(self, api_key: int, version: int) -> str | None:
        """None when the target accepts this api version, else why not."""
        r = self.api_versions.get(api_key)
        if r is None:
            return f"target does not support api {api_key} at all"
        if not r[0] <= version <= r[1]:
            return f"target supports api {api_key} versions {r[0]}-{r[1]}, the trace used v{version}"
        return None

    def home_node(self, recorded_node: int | None) -> int:
        ids = sorted(self.nodes)
        if recorded_node in self.nodes:
            return recorded_node
        return ids[(recorded_node or 0) % len(ids)]

    def observe_metadata(self, md: Any) -> None:
        with self.lock:
            for b in getattr(md, "brokers", ()) or ():
                self.cc.nodes[int(b.node_id)] = (b.host, int(b.port))
            for t in getattr(md, "topics", ()) or ():
                tid = getattr(t, "topic_id", None)
                if isinstance(tid, uuid.UUID) and tid.int and t.name:
                    self.topic_names[tid] = t.name
                for p in t.partitions or ():
                    if t.name and int(p.leader_id) >= 0:
                        self.leaders[(t.name, int(p.partition_index))] = int(p.leader_id)

    def refresh_topics(self, names: list[str]) -> Any:
        with self.lock:
            self.control_requests["metadata"] += 1
            md = self.cc.refresh(names)
        self.observe_metadata(md)
        return md

    def leader(self, name: str | None, tid: uuid.UUID | None, partition: int) -> int | None:
        name = name or self.topic_names.get(tid)
        if name is None:
            return None
        if (name, partition) not in self.leaders:
            self.refresh_topics([name])
        return self.leaders.get((name, partition))

    def coordinator(self, key_type: int, key: str) -> int | None:
        node = self.coordinators.get((key_type, key))
        if node is not None:
            return node
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while True:
            with self.lock:
                self.control_requests["find_coordinator"] += 1
                error, node = self.cc.find_coordinator(key, key_type)
            if error == 0:
                self.coordinators[(key_type, key)] = node
                return node
            if error not in (14, 15) or time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def invalidate(self, api_key: int, body: Any) -> None:
        key = coordinator_key(api_key, body)
        if key is not None:
            self.coordinators.pop(key, None)
        name, tid, partition = first_partition(body)
        name = name or self.topic_names.get(tid)
        if name is not None:
            self.leaders.pop((name, partition), None)

    def close(self) -> None:
        self.cc.close()


# --- the replay ----------------------------------------------------------------------------------


@dataclass
class ReplayReport:
    trace: str
    target: str
    out: str
    recorded_exchanges: int = 0
    replayed: int = 0
    not_replayed: collections.Counter = field(default_factory=collections.Counter)
    not_replayed_rows: list[dict] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    retries: list[dict] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    error_code_differences: int = 0
    error_code_examples: list[dict] = field(default_factory=list)
    control_requests: dict = field(default_factory=dict)
    mappings: dict = field(default_factory=dict)
    rewritten: int = 0
    split_requests: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    payloads: str = "keep"

    @property
    def not_replayed_total(self) -> int:
        return sum(self.not_replayed.values())

    @property
    def ok(self) -> bool:
        return not self.not_replayed and not self.problems

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["not_replayed"] = dict(self.not_replayed)
        d["not_replayed_total"] = self.not_replayed_total
        d["ok"] = self.ok
        return d

    def summary(self) -> str:
        lines = [f"kipcheck replay: {self.replayed}/{self.recorded_exchanges} exchange(s) replayed against "
                 f"{self.target} in {self.duration_s:.1f}s; {self.rewritten} rewritten with remapped ids; "
                 f"{len(self.retries)} retr{'y' if len(self.retries) == 1 else 'ies'}; "
                 f"{self.error_code_differences} with error codes different from the recording"]
        if self.not_replayed:
            lines.append(f"  not replayed: {self.not_replayed_total}")
            for reason, n in self.not_replayed.most_common():
                lines.append(f"    {n:5d}  {reason}")
        for p in self.problems[:20]:
            lines.append(f"  problem: seq {p.get('seq')} {p.get('api', '')}: {p['problem']}")
        if len(self.problems) > 20:
            lines.append(f"  ... {len(self.problems) - 20} more problem(s) in {REPORT_FILE}")
        lines.append(f"  trace: {self.out}; report: {os.path.join(self.out, REPORT_FILE)}")
        return "\n".join(lines)


def _error_codes(entity: Any) -> tuple[int | None, list[int]]:
    """(top-level error_code, every other error code -- nested `error_code` and any
    `*_error_code` field -- zeros included)."""
    top = getattr(entity, "error_code", None)
    top = None if top is None else int(getattr(top, "value", top))
    codes: list[int] = []

    def walk(e: Any, depth: int) -> None:
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            if (f.name == "error_code" and depth) or (f.name.endswith("_error_code") and v is not None):
                codes.append(int(getattr(v, "value", v)))  # also partition_error_code, acknowledge_error_code
            elif isinstance(v, tuple):
                for c in v:
                    if dataclasses.is_dataclass(c):
                        walk(c, depth + 1)
            elif dataclasses.is_dataclass(v):
                walk(v, depth + 1)

    if entity is not None:
        walk(entity, 0)
    return top, codes


def retriable_error(recorded: Any, target: Any) -> int | None:
    """The retriable error to retry on, or None. Retried only when the recorded response did
    not have it and the whole request failed with it (a top-level error, or every nested
    entry failed retriably), so no partial effect is ever sent twice."""
    t_top, t_codes = _error_codes(target)
    r_top, r_codes = _error_codes(recorded)
    recorded_all = set(r_codes) | ({r_top} if r_top is not None else set())
    if t_top in RETRIABLE and t_top not in recorded_all:
        return t_top
    if t_top in (None, 0) and t_codes and all(c in RETRIABLE for c in t_codes):
        fresh = [c for c in t_codes if c not in recorded_all]
        if fresh:
            return fresh[0]
    return None


class Replayer:
    """`load()` reads and plans the trace (no target needed: bad input fails fast), then
    `run(bootstrap)` replays it."""

    def __init__(self, trace_dir: str, out_dir: str, *, pace: str = "fast", max_attempts: int = 8,
                 request_timeout_s: float = 30.0, strict_trace: bool = True) -> None:
        if pace not in ("fast", "recorded"):
            raise ValueError(f"pace must be 'fast' or 'recorded', not {pace!r}")
        self.trace_dir, self.out_dir = trace_dir, out_dir
        self.pace, self.max_attempts, self.request_timeout_s = pace, max_attempts, request_timeout_s
        self.strict_trace = strict_trace
        self.report = ReplayReport(trace_dir, "", out_dir)
        self.remap = IdRemap()
        self.plan: Plan | None = None
        self._remap_lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._cond = threading.Condition()
        self._progress: dict[int, int] = {}
        self._abort: str | None = None

    # -- entry ---------------------------------------------------------------------------

    def load(self) -> Plan:
        """Read the trace and plan the replay; raises TraceError (naming the segment) or
        ReplayError (unusable output directory)."""
        self._check_out_dir()
        table, trace_report = read_trace(self.trace_dir, strict=self.strict_trace)
        for s in trace_report.skipped:
            self.report.gaps.append({"count": None, "reason": f"segment not read: {os.path.basename(s.path)}: {s.reason}"})
            self._not_replayed_reason(f"segment not read ({s.reason})", 0)
        cols = [c for c in _COLUMNS if c in table.column_names]
        plan = plan_trace(table.select(cols).to_pylist())
        self.report.recorded_exchanges, self.report.payloads = plan.total, plan.payloads
        for count, reason in plan.gaps:
            self.report.gaps.append({"count": count, "reason": reason})
            self._not_replayed_reason(f"gap in the recorded trace: {reason}", count)
        self._learn_recorded_topics(plan)
        self.plan = plan
        return plan

    def run(self, bootstrap: str, target_name: str | None = None) -> ReplayReport:
        plan = self.plan or self.load()
        self.report.target = target_name or bootstrap
        self.router = TargetRouter(bootstrap)
        # "keep": under hash/drop the replayed payloads already are the recorded digests (or
        # nulls), so kept as sent they compare equal to the recorded trace's; hashing them
        # again would not
        self.writer = TraceWriter(self.out_dir, "keep", flush_seconds=0.2).start()
        started = time.monotonic()
        self._t0 = min((x.request_mono_ns for items in plan.connections.values() for x in items), default=0)
        self._start_ns = time.monotonic_ns()
        try:
            self._run_workers(plan)
        finally:
            self.writer.close()
            self.router.close()
            self.report.duration_s = time.monotonic() - started
            self.report.control_requests = dict(self.router.control_requests)
            self.report.mappings = self.remap.snapshot()
            if self._abort:
                self.report.problems.append({"problem": f"replay aborted: {self._abort}"})
            with open(os.path.join(self.out_dir, REPORT_FILE), "w") as f:
                json.dump(self.report.to_dict(), f, indent=1, default=str)
        return self.report

    def _learn_recorded_topics(self, plan: Plan) -> None:
        """Recorded topic id -> name from the whole trace first: a request may name a topic
        by id before any replayed response has shown the pair."""
        for items in plan.connections.values():
            for x in items:
                if x.request is None:
                    continue
                self.remap.learn_recorded_topics(x.request.body)
                if x.response_bytes is not None:
                    resp = self._recorded_response(x)
                    if resp is not None:
                        self.remap.learn_recorded_topics(resp)

    def _check_out_dir(self) -> None:
        if os.path.isdir(self.out_dir) and any(n.endswith((".parquet", ".parquet.tmp")) for n in os.listdir(self.out_dir)):
            raise ReplayError(f"output directory {self.out_dir} already holds a trace; choose an empty one")
        if os.path.abspath(self.out_dir) == os.path.abspath(self.trace_dir):
            raise ReplayError("the output directory must differ from the recorded trace directory")

    def _run_workers(self, plan: Plan) -> None:
        self._progress = {cid: 0 for cid in plan.connections}
        self._broker_nodes = plan.broker_nodes
        # connections open in recorded order (a diff numbers a client's connections by their
        # first request): the k-th connection's first request waits for the k-1 before it
        # to have sent theirs. Still only waits on earlier request times: no cycle.
        firsts = sorted(plan.connections, key=lambda c: (plan.connections[c][0].request_mono_ns, c))
        self._open_rank = {cid: k for k, cid in enumerate(firsts)}
        self._opened: set[int] = set()
        threads = [threading.Thread(target=self._worker, args=(cid, items), name=f"replay-conn-{cid}", daemon=True)
                   for cid, items in sorted(plan.connections.items())]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    # -- one recorded connection ----------------------------------------------------------

    def _worker(self, cid: int, items: list[Recorded]) -> None:
        clients: dict[int, RawClient] = {}
        last_node: list[int | None] = [None]
        try:
            for i, x in enumerate(items):
                if i == 0:
                    self._wait_turn_to_open(cid)
                self._wait(x)
                if self._abort:
                    self._not_replayed(x, f"replay aborted before this request: {self._abort}")
                else:
                    try:
                        self._replay(x, clients, last_node)
                    except ReplayError as exc:
                        self._abort = str(exc)
                        self._not_replayed(x, f"replay aborted: {exc}")
                    except Exception as exc:  # noqa: BLE001 - one request's failure is reported, the rest go on
                        log.exception("replay of seq %s failed", x.seq)
                        self._problem(x, f"replayer error: {exc!r}")
                self._opened_connection(cid)  # also when the first exchange was not sent
                with self._cond:
                    self._progress[cid] = i + 1
                    self._cond.notify_all()
        finally:
            self._opened_connection(cid)
            for c in clients.values():
                c.close()

    def _wait_turn_to_open(self, cid: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._abort is not None or len(self._opened) >= self._open_rank[cid])

    def _opened_connection(self, cid: int) -> None:
        if cid in self._opened:
            return
        with self._cond:
            self._opened.add(cid)
            self._cond.notify_all()

    def _wait(self, x: Recorded) -> None:
        if x.deps:
            with self._cond:
                self._cond.wait_for(lambda: self._abort is not None or all(self._progress[c] >= n for c, n in x.deps))
        if self.pace == "recorded":
            due = self._start_ns + (x.request_mono_ns - self._t0)
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)

    def _replay(self, x: Recorded, clients: dict[int, RawClient], last_node: list[int | None]) -> None:
        if x.skip_reason is not None:
            self._not_replayed(x, x.skip_reason)
            return
        if x.api_key != API_VERSIONS:
            why = self.router.supports(x.api_key, x.api_version)
            if why is not None:
                self._not_replayed(x, why)
                return
        body = x.request.body
        frame = self._rewritten_frame(x)
        recorded_resp = self._recorded_response(x) if x.response_bytes is not None else None
        parts = self._split(x, frame)
        if parts is None:
            result = self._send(x, clients, frame, recorded_resp, lambda: self._route(x, body, last_node))
            if result is None:
                return
            node, client, req_mono, req_wall, resp, resp_mono, resp_wall, target_resp = result
            last_node[0] = node
            upstream = f"{client.host}:{client.port}"
        else:
            result = self._send_split(x, clients, frame, parts, recorded_resp)
            if result is None:
                return
            upstream, client, req_mono, req_wall, resp, resp_mono, resp_wall, target_resp = result
        if resp is None:
            self._emit(x, client, frame, req_mono, req_wall, status=ts.STATUS_NO_RESPONSE_EXPECTED, upstream=upstream)
            return
        self._emit(x, client, frame, req_mono, req_wall, response=resp, resp_mono=resp_mono, resp_wall=resp_wall,
                   body=target_resp, upstream=upstream)
        self._learn(x, body, recorded_resp, target_resp)

    def _send(self, x: Recorded, clients: dict[int, RawClient], frame: bytes, recorded_resp: Any, route) -> tuple | None:
        """Send one frame (retrying retriable whole failures); None when the connection
        closed (already written as a connection_closed row and a problem)."""
        expect = x.status != ts.STATUS_NO_RESPONSE_EXPECTED
        attempt = 0
        while True:
            attempt += 1
            node = route()
            client = self._client(clients, node)
            req_mono, req_wall = time.monotonic_ns(), time.time_ns() // 1_000_000
            self._opened_connection(x.connection_id)
            try:
                resp = client.send_frame(framing.size_prefixed(frame), expect_response=expect,
                                         timeout=self.request_timeout_s)
            except (ConnectionClosed, OSError) as exc:
                clients.pop(node, None)
                client.close()
                self._emit(x, client, frame, req_mono, req_wall, status=ts.STATUS_CONNECTION_CLOSED)
                self._problem(x, f"target node {node} closed the connection or timed out: {exc}")
                return None
            resp_mono, resp_wall = time.monotonic_ns(), time.time_ns() // 1_000_000
            if resp is None:
                return node, client, req_mono, req_wall, None, None, None, None
            target_resp = None
            try:
                target_resp = framing.decode_response_frame(resp, x.api_key, x.api_version).body
            except Exception as exc:  # noqa: BLE001
                self._problem(x, f"target response does not decode: {exc}")
            code = retriable_error(recorded_resp, target_resp) if target_resp is not None else None
            if code is not None and attempt < self.max_attempts:
                delay = min(0.05 * 2 ** attempt, 1.0)
                self._retry(x, attempt, node, code, delay)
                if code in ROUTE_INVALIDATING:
                    self.router.invalidate(x.api_key, self._body_of(frame))
                time.sleep(delay)
                continue
            if code is not None:
                self._problem(x, f"still {RETRIABLE[code]} after {attempt} attempts")
            return node, client, req_mono, req_wall, resp, resp_mono, resp_wall, target_resp

    def _split(self, x: Recorded, frame: bytes) -> dict[int, Any] | None:
        """Sub-requests per target leader when a splittable request's partitions are led
        by different target nodes (None: send it whole)."""
        if x.api_key not in SPLIT_FIELDS or len(self.router.nodes) < 2:
            return None
        body = self._body_of(frame)
        f = _canonical_fields(body)
        if int(f.get("session_id") or 0) > 0 or int(f.get("session_epoch") or -1) > 0:
            return None  # an incremental fetch session lives on one broker: not split (routing reports it)
        names = {tid: name for name, tid in self.remap.target_topic_ids.items()}
        names.update(self.router.topic_names)

        def node_of(topic: Any, partition: int) -> int | None:
            name, tid = topic_key(topic)
            name = name or names.get(tid)
            return None if name is None else self.router.leader(name, None, partition)

        parts = split_request(x.api_key, body, node_of)
        return parts if parts is not None and len(parts) > 1 else None

    def _send_split(self, x: Recorded, clients: dict[int, RawClient], frame: bytes, parts: dict[int, Any],
                    recorded_resp: Any) -> tuple | None:
        header = x.request_bytes[: x.request.header.header_size]
        results = []
        for node, sub in parts.items():
            sub_frame = header + framing.encode_entity(sub)
            r = self._send(x, clients, sub_frame, recorded_resp, lambda node=node, sub=sub: self._sub_route(x, node, sub))
            if r is None:
                return None
            results.append(r)
        with self._report_lock:
            self.report.split_requests.append({"seq": x.seq, "api": x.name, "nodes": sorted(parts)})
        client = results[0][1]
        upstream = ",".join(f"{r[1].host}:{r[1].port}" for r in results)
        req_mono, req_wall = results[0][2], results[0][3]
        if results[0][4] is None:  # acks=0
            return upstream, client, req_mono, req_wall, None, None, None, None
        bodies = [r[7] for r in results]
        if any(b is None for b in bodies):
            self._problem(x, "a sub-request's response does not decode: the merged response is the first one")
            return upstream, client, req_mono, req_wall, results[0][4], results[-1][5], results[-1][6], bodies[0]
        merged = merge_responses(x.api_key, bodies, self._body_of(frame))
        resp = framing.encode_response(merged, x.correlation_id, x.api_key, x.api_version)[4:]
        return upstream, client, req_mono, req_wall, resp, results[-1][5], results[-1][6], merged

    def _sub_route(self, x: Recorded, node: int, sub: Any) -> int:
        """A sub-request's node: its leader now (re-resolved after NOT_LEADER retries)."""
        for name, tid, partition in request_partitions(sub):
            name = name or self.router.topic_names.get(tid)
            if name is not None:
                leader = self.router.leader(name, None, partition)
                if leader is not None:
                    return leader
        return node

    def _rewritten_frame(self, x: Recorded) -> bytes:
        body = x.request.body
        with self._remap_lock:
            rw = self.remap.rewrite(x.api_key, body)
        names = sorted({u.topic_name for u in rw.unmapped if u.kind == "topic_id" and u.topic_name})
        if names:
            md = self.router.refresh_topics(names)
            with self._remap_lock:
                for t in md.topics:
                    if isinstance(getattr(t, "topic_id", None), uuid.UUID) and t.name:
                        self.remap.learn_target_topic(t.name, t.topic_id)
                rw = self.remap.rewrite(x.api_key, body)
        for u in {(u.kind, u.value, u.topic_name) for u in rw.unmapped}:
            kind, value, name = u
            what = f"topic id {value} ({name or 'name unknown to the trace'}) has no target topic id" \
                if kind == "topic_id" else f"producer {value} has no target producer id (its InitProducerId was not replayed or failed)"
            self._problem(x, f"unmapped {what}; sent as recorded")
        if not rw.changed:
            return x.request_bytes
        with self._report_lock:
            self.report.rewritten += 1
        return x.request_bytes[: x.request.header.header_size] + framing.encode_entity(rw.request)

    def _body_of(self, frame: bytes) -> Any:
        return framing.decode_request(frame, strict=False).body

    def _route(self, x: Recorded, body: Any, last_node: list[int | None]) -> int:
        home = self.router.home_node(self._broker_nodes.get(x.upstream or ""))
        sent_body = body
        key = coordinator_key(x.api_key, sent_body)
        if key is not None:
            node = self.router.coordinator(*key)
            return home if node is None else node
        if x.api_key in PARTITION_APIS:
            leaders: dict[int, list[str]] = collections.defaultdict(list)
            for name, tid, partition in request_partitions(sent_body):
                name = name or self.remap.recorded_topic_names.get(tid)
                node = None if name is None else self.router.leader(name, None, partition)
                if node is not None:
                    leaders[node].append(f"{name}-{partition}")
            if not leaders:
                return last_node[0] if last_node[0] is not None else home  # sessions live on one node
            node = next(iter(leaders))
            if len(leaders) > 1 and x.api_key not in SPLIT_FIELDS:
                others = {n: ps for n, ps in leaders.items() if n != node}
                self._problem(x, f"partitions of one request are led by different target nodes; sent to node {node}, "
                                 f"so {others} answer from a non-leader (sessions: not split)")
            return node
        return home

    def _client(self, clients: dict[int, RawClient], node: int) -> RawClient:
        c = clients.get(node)
        if c is None:
            host, port = self.router.nodes[node]
            try:
                c = clients[node] = RawClient(host, port, client_id=None, timeout=self.request_timeout_s)
            except ConnectionError as exc:
                raise ReplayError(f"target node {node} at {host}:{port} unreachable: {exc}") from exc
        return c

    def _learn(self, x: Recorded, body: Any, recorded: Any, target: Any) -> None:
        with self._remap_lock:
            self.remap.learn(x.api_key, body, recorded, target)
        if x.api_key == ApiKey.METADATA and target is not None:
            self.router.observe_metadata(target)
        if recorded is not None and target is not None:
            r, t = _error_codes(recorded), _error_codes(target)
            if (r[0], sorted(set(r[1]) - {0})) != (t[0], sorted(set(t[1]) - {0})):
                with self._report_lock:
                    self.report.error_code_differences += 1
                    if len(self.report.error_code_examples) < 50:
                        self.report.error_code_examples.append(
                            {"seq": x.seq, "connection_id": x.connection_id, "api": x.name,
                             "recorded": [r[0], sorted(set(r[1]) - {0})], "target": [t[0], sorted(set(t[1]) - {0})]})

    def _recorded_response(self, x: Recorded) -> Any:
        try:
            return framing.decode_response_frame(x.response_bytes, x.api_key, x.api_version).body
        except Exception:  # noqa: BLE001 - learning from it is skipped; decode_error says why
            return None

    # -- output -----------------------------------------------------------------------------

    def _emit(self, x: Recorded, client: RawClient, frame: bytes, req_mono: int, req_wall: int, *, status: str = ts.STATUS_OK,
              response: bytes | None = None, resp_mono: int | None = None, resp_wall: int | None = None,
              body: Any = None, upstream: str | None = None) -> None:
        try:
            local = client._sock.getsockname()
        except OSError:
            local = ("?", 0)
        item = RawExchange(seq=x.seq, connection_id=x.connection_id, listener="replay",
                           upstream=upstream or f"{client.host}:{client.port}", client_host=str(local[0]),
                           client_port=int(local[1]), api_key=x.api_key, api_version=x.api_version,
                           correlation_id=x.correlation_id, request_mono_ns=req_mono, request_wall_ms=req_wall,
                           request_frame=frame, status=status, response_mono_ns=resp_mono,
                           response_wall_ms=resp_wall, response_frame=response, response_body=body)
        while not self.writer.offer(item):
            time.sleep(0.002)
        with self._report_lock:
            self.report.replayed += 1

    def _not_replayed(self, x: Recorded, reason: str) -> None:
        with self._report_lock:
            self.report.not_replayed[reason] += 1
            if len(self.report.not_replayed_rows) < 1000:
                self.report.not_replayed_rows.append({"seq": x.seq, "connection_id": x.connection_id,
                                                      "api": x.name, "api_version": x.api_version, "reason": reason})

    def _not_replayed_reason(self, reason: str, count: int) -> None:
        """count 0: unknown (an opaque connection, an unread segment): listed with count 0,
        which still makes the replay not ok."""
        if count <= 0:
            reason += " (number of exchanges unknown)"
        with self._report_lock:
            self.report.not_replayed[reason] += max(count, 0)

    def _problem(self, x: Recorded, problem: str) -> None:
        with self._report_lock:
            self.report.problems.append({"seq": x.seq, "connection_id": x.connection_id, "api": x.name,
                                         "problem": problem})

    def _retry(self, x: Recorded, attempt: int, node: int, code: int, delay: float) -> None:
        with self._report_lock:
            self.report.retries.append({"seq": x.seq, "connection_id": x.connection_id, "api": x.name,
                                        "attempt": attempt, "node": node, "error_code": code,
                                        "error": RETRIABLE[code], "backoff_s": delay})


def replay(trace_dir: str, bootstrap: str, out_dir: str, *, target_name: str | None = None,
           **kwargs: Any) -> ReplayReport:
    return Replayer(trace_dir, out_dir, **kwargs).run(bootstrap, target_name)
