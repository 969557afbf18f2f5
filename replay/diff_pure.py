"""`kipcheck diff` in plain Python (pyarrow in, lists of dicts inside).

The small, readable implementation of the rules in replay/diff_fields.py; the Spark
implementation (replay/diff_spark.py) must give the same rows, which the parity tests check.
Meant for small traces and for tests; the Spark one is for large traces.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import diff_fields as f
from replay.diff_input import TraceInput

Row = dict[str, Any]
Key = tuple


def load_exchanges(inp: TraceInput, with_json: bool = False) -> list[Row]:
    """The decoded exchanges of an inspected trace (columns of diff_fields.READ_COLUMNS)."""
    cols = list(f.READ_COLUMNS) + ([f.JSON_COLUMN] if with_json else [])
    tables = [pq.read_table(p, columns=cols) for p in inp.files]
    t = pa.concat_tables(tables) if tables else None
    if t is None:
        return []
    keep = pc.and_(pc.equal(t["kind"], "exchange"), pc.is_null(t["decode_error"]))
    return t.filter(keep).to_pylist()


# --- alignment -------------------------------------------------------------------------------


def add_alignment_keys(rows: list[Row]) -> None:
    """Sets _client, _conn_ord, _req, _api_ord on every row (see diff_fields module docstring)."""
    first: dict[int, int] = {}
    client: dict[int, str] = {}
    for r in rows:
        cid = r["connection_id"]
        first[cid] = min(first.get(cid, r["request_mono_ns"]), r["request_mono_ns"])
        client[cid] = max(client.get(cid, ""), r["client_id"] or "")
    by_client: dict[str, list[int]] = defaultdict(list)
    for cid in first:
        by_client[client[cid]].append(cid)
    conn_ord = {}
    for conns in by_client.values():
        for i, cid in enumerate(sorted(conns, key=lambda c: (first[c], c)), 1):
            conn_ord[cid] = i
    per_api: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        r["_client"] = client[r["connection_id"]]
        r["_conn_ord"] = conn_ord[r["connection_id"]]
        r["_req"] = f.request_fingerprint(r["api_key"], r["topics"], r["group_id"], r["transactional_id"])
        per_api[(r["connection_id"], r["api_key"], r["_req"])].append(r)
    for group in per_api.values():
        for i, r in enumerate(sorted(group, key=_time_order), 1):
            r["_api_ord"] = i


def _time_order(r: Row) -> tuple:
    return (r["request_mono_ns"], r["seq"])


def _match(a_rows: list[Row], b_rows: list[Row], key) -> tuple[list[tuple[Row, Row]], list[Row], list[Row]]:
    b_by = {key(r): r for r in b_rows}
    pairs, only_a = [], []
    for r in a_rows:
        other = b_by.pop(key(r), None)
        if other is None:
            only_a.append(r)
        else:
            pairs.append((r, other))
    return pairs, only_a, list(b_by.values())


def _leftover_ordinals(rows: list[Row]) -> None:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r["_client"], r["api_key"])].append(r)
    for group in groups.values():
        for i, r in enumerate(sorted(group, key=_time_order), 1):
            r["_left_ord"] = i


def align(a_rows: list[Row], b_rows: list[Row]) -> tuple[list[tuple[Row, Row, str]], list[Row], list[Row]]:
    """(pairs with how they aligned, only in A, only in B)."""
    first, left_a, left_b = _match(a_rows, b_rows,
                                   lambda r: (r["_client"], r["_conn_ord"], r["api_key"], r["_req"], r["_api_ord"]))
    _leftover_ordinals(left_a)
    _leftover_ordinals(left_b)
    second, only_a, only_b = _match(left_a, left_b, lambda r: (r["_client"], r["api_key"], r["_left_ord"]))
    pairs = [(a, b, f.ALIGN_CONNECTION) for a, b in first] + [(a, b, f.ALIGN_CLIENT) for a, b in second]
    return pairs, only_a, only_b


# --- id normalization ----------------------------------------------------------------------------


def _id_occurrences(r: Row) -> Iterable[tuple[str, Any, int]]:
    for slot, column, sub, cat in f.ID_SLOTS:
        if sub is None:
            yield cat, r[column], slot
        else:
            for pos, entry in enumerate(r[column] or ()):
                yield cat, entry[sub], slot + pos


def id_placeholders(rows: list[Row]) -> dict[tuple[str, Any], str]:
    """(category, raw value) -> placeholder, for one trace (rows carry alignment keys)."""
    names: dict[str, str] = {}
    for r in rows:
        for column in f.TOPIC_NAME_LISTS:
            for entry in r[column] or ():
                tid, name = entry["topic_id"], entry["topic"]
                if tid is not None and name is not None and (tid not in names or name < names[tid]):
                    names[tid] = name
    first: dict[tuple[str, Any], tuple] = {}
    for r in rows:
        order = (r["_client"], r["_conn_ord"], r["request_mono_ns"], r["seq"])
        for cat, value, slot in _id_occurrences(r):
            if f.is_sentinel(cat, value) or (cat == "topic_id" and value in names):
                continue
            k = (cat, value)
            o = order + (slot,)
            if k not in first or o < first[k]:
                first[k] = o
    out: dict[tuple[str, Any], str] = {("topic_id", tid): f.topic_placeholder(n) for tid, n in names.items()}
    for cat in f.ID_CATEGORIES:
        ranked = sorted((o, v) for (c, v), o in first.items() if c == cat)
        for i, (_, v) in enumerate(ranked, 1):
            out[(cat, v)] = f.placeholder(cat, i)
    return out


def _value(v: Any, fld: f.Field, ids: dict) -> str:
    if fld.category is not None and v is not None:
        mapped = ids.get((fld.category, v))
        if mapped is not None:
            return mapped
    return f.fmt(v, fld.kind)


# --- comparison ----------------------------------------------------------------------------------


def compare_pair(a: Row, b: Row, ids_a: dict, ids_b: dict, with_json: bool) -> list[tuple[str, str, str]]:
    """(path, a value, b value) for every compared field that differs."""
    out = []
    for fld in f.SCALARS:
        va, vb = _value(a[fld.name], fld, ids_a), _value(b[fld.name], fld, ids_b)
        if va != vb:
            out.append((fld.name, va, vb))
    for column, fields in f.LISTS:
        la = [{x.name: _value(e[x.name], x, ids_a) for x in fields} for e in a[column] or ()]
        lb = [{x.name: _value(e[x.name], x, ids_b) for x in fields} for e in b[column] or ()]
        if la == lb:
            continue
        for i in range(max(len(la), len(lb))):
            ea = la[i] if i < len(la) else None
            eb = lb[i] if i < len(lb) else None
            for x in fields:
                va = f.MISSING_VALUE if ea is None else ea[x.name]
                vb = f.MISSING_VALUE if eb is None else eb[x.name]
                if va != vb:
                    out.append((f"{column}[{i}].{x.name}", va, vb))
    if with_json:
        out.extend(f.json_differences(a.get(f.JSON_COLUMN), b.get(f.JSON_COLUMN)))
    return out


def _presence_field(r: Row) -> str:
    api = f.api_label(r["api_name"], r["api_key"])
    idle = f.is_idle_poll(api, r["error_code"], r["error_codes"], r["batches"], r["acquired_records"])
    return f.IDLE_POLL_FIELD if idle else f.EXCHANGE_FIELD


def _divergence(kind: str, a: Row | None, b: Row | None, path: str, va: str, vb: str, how: str | None) -> Row:
    r = a if a is not None else b
    api = f.api_label(r["api_name"], r["api_key"])
    field = f.generic_field(path)
    return {
        "kind": kind, "api_key": r["api_key"], "api_name": api, "field": field, "path": path,
        "a_value": va, "b_value": vb,
        "a_seq": a["seq"] if a else None, "b_seq": b["seq"] if b else None,
        "a_connection_id": a["connection_id"] if a else None, "b_connection_id": b["connection_id"] if b else None,
        "client_id": r["_client"], "align": how,
        "a_error_code": a["error_code"] if a else None, "b_error_code": b["error_code"] if b else None,
        "requirement_ids": f.requirements_for(api, field), "noise": False,
    }


def diff_rows(a_rows: list[Row], b_rows: list[Row], with_json: bool = False) -> tuple[list[Row], dict]:
    """Divergence rows of B against A (noise not applied) and alignment counts."""
    add_alignment_keys(a_rows)
    add_alignment_keys(b_rows)
    ids_a, ids_b = id_placeholders(a_rows), id_placeholders(b_rows)
    pairs, only_a, only_b = align(a_rows, b_rows)
    out: list[Row] = []
    pairs_per_api: dict[str, int] = defaultdict(int)
    for a, b, how in pairs:
        pairs_per_api[f.api_label(a["api_name"], a["api_key"])] += 1
        for path, va, vb in compare_pair(a, b, ids_a, ids_b, with_json):
            out.append(_divergence(f.KIND_FIELD, a, b, path, va, vb, how))
    for r in only_a:
        out.append(_divergence(f.KIND_ONLY_A, r, None, _presence_field(r), "<present>", f.MISSING_VALUE, None))
    for r in only_b:
        out.append(_divergence(f.KIND_ONLY_B, None, r, _presence_field(r), f.MISSING_VALUE, "<present>", None))
    stats = {
        "pairs_connection": sum(1 for p in pairs if p[2] == f.ALIGN_CONNECTION),
        "pairs_client": sum(1 for p in pairs if p[2] == f.ALIGN_CLIENT),
        "only_in_a": len(only_a), "only_in_b": len(only_b),
        "pairs_per_api": dict(sorted(pairs_per_api.items())),
    }
    return out, stats


# --- noise -----------------------------------------------------------------------------------------


def learn_noise(noise_rows: list[Row], stats: dict) -> list[dict]:
    """Diffy's noise: (api, field) that differ between two runs of the same target, with rates.

    rate = aligned pairs differing in that field / aligned pairs of that api; for
    ``<exchange>`` / ``<idle poll>`` (unaligned exchanges) = unaligned / (pairs + unaligned)."""
    pairs_diff: dict[tuple[str, str], set] = defaultdict(set)
    unaligned: dict[tuple[str, str], int] = defaultdict(int)
    for r in noise_rows:
        if r["kind"] == f.KIND_FIELD:
            pairs_diff[(r["api_name"], r["field"])].add((r["a_seq"], r["b_seq"]))
        else:
            unaligned[(r["api_name"], r["field"])] += 1
    per_api = stats["pairs_per_api"]
    table = []
    for (api, field), seqs in pairs_diff.items():
        table.append(noise_entry(api, field, len(seqs), per_api.get(api, 0)))
    for (api, field), n in unaligned.items():
        table.append(noise_entry(api, field, n, per_api.get(api, 0) + n))
    return sorted(table, key=lambda e: (e["api_name"], e["field"]))


def noise_entry(api: str, field: str, differing: int, total: int) -> dict:
    return {"api_name": api, "field": field, "differing": differing, "compared": total,
            "rate": round(differing / total, 6) if total else 1.0}


def apply_noise(rows: list[Row], noise: list[dict]) -> None:
    noisy = {(e["api_name"], e["field"]) for e in noise}
    for r in rows:
        r["noise"] = (r["api_name"], r["field"]) in noisy or r["field"] == f.IDLE_POLL_FIELD


# --- summary groups ----------------------------------------------------------------------------------

GROUP_KEY = ("noise", "kind", "api_name", "field", "a_error_code", "b_error_code")
SAMPLES = 3


def _sample_order(r: Row) -> tuple:
    return (r["a_seq"] if r["a_seq"] is not None else -1, r["b_seq"] if r["b_seq"] is not None else -1, r["path"])


def group_divergences(rows: list[Row]) -> list[dict]:
    """Summary groups keyed by (noise, kind, api, field, error codes), with samples."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in GROUP_KEY)].append(r)
    out = []
    for key, members in groups.items():
        members.sort(key=_sample_order)
        g = dict(zip(GROUP_KEY, key))
        g["count"] = len(members)
        g["exchanges"] = len({(m["a_seq"], m["b_seq"]) for m in members})
        g["requirement_ids"] = members[0]["requirement_ids"]
        g["samples"] = [{k: m[k] for k in ("a_seq", "b_seq", "path", "a_value", "b_value")} for m in members[:SAMPLES]]
        out.append(g)
    return sort_groups(out)


def sort_groups(groups: list[dict]) -> list[dict]:
    return sorted(groups, key=lambda g: (g["noise"], -g["count"], g["api_name"], g["field"], g["kind"],
                                         -1 if g["a_error_code"] is None else g["a_error_code"],
                                         -1 if g["b_error_code"] is None else g["b_error_code"]))


# --- entry -----------------------------------------------------------------------------------------------


def run(a: TraceInput, b: TraceInput, noise: TraceInput | None, with_json: bool) -> tuple[pa.Table, dict]:
    """(divergence table, result dict with stats, noise table and summary groups)."""
    a_rows, b_rows = load_exchanges(a, with_json), load_exchanges(b, with_json)
    rows, stats = diff_rows(a_rows, b_rows, with_json)
    noise_table: list[dict] = []
    if noise is not None:
        n_rows, n_stats = diff_rows(a_rows, load_exchanges(noise, with_json), with_json)
        noise_table = learn_noise(n_rows, n_stats)
        stats["noise_alignment"] = {k: v for k, v in n_stats.items() if k != "pairs_per_api"}
    apply_noise(rows, noise_table)
    rows.sort(key=lambda r: (r["kind"], _sample_order(r)))
    table = pa.Table.from_pylist(rows, schema=f.divergence_schema())
    return table, {"alignment": stats, "noise": noise_table, "groups": group_divergences(rows),
                   "compared_exchanges": {"a": len(a_rows), "b": len(b_rows)}}
