"""The schema-version-2 typed columns that used to be read out of the JSON columns.

Checks and diffs need a handful of values that version 1 only kept inside
``request_json`` / ``response_json`` (Fetch isolation level, EndTxn's commit flag, the
producer id/epoch an InitProducerId or EndTxn v5+ grants, DescribeShareGroupOffsets'
start offsets). The writer process fills them from the decoded kio bodies; the reader
fills them for version-1 segments from the JSON text. One function serves both, because
the JSON is the kio field names as written by ``trace_writer.to_json``: the same values,
whichever side they come from (the migration test holds them to it).
"""

from __future__ import annotations

import enum
import json
import uuid
from typing import Any

from reference_impl.protocol.api_keys import ApiKey

COLUMNS = ("isolation_level", "txn_committed", "granted_producer_id", "granted_producer_epoch", "share_start_offsets")
_ISOLATION_APIS = (ApiKey.FETCH, ApiKey.LIST_OFFSETS)
_GRANT_APIS = (ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN)


def _get(entity: Any, name: str) -> Any:
    if entity is None:
        return None
    if isinstance(entity, dict):
        return entity.get(name)
    return getattr(entity, name, None)


def _int(v: Any) -> int | None:
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return int(v)


def _text(v: Any) -> str | None:
    if isinstance(v, uuid.UUID):
        return str(v)
    return v if isinstance(v, str) else None


def _start_offsets(response: Any) -> list[dict]:
    """Every (topic id, partition, start offset, error code) of a DescribeShareGroupOffsets
    response (KIP-932: the share-partition start offset, SPSO)."""
    out = []
    for g in _get(response, "groups") or ():
        for t in _get(g, "topics") or ():
            for p in _get(t, "partitions") or ():
                out.append({"topic_id": _text(_get(t, "topic_id")), "partition": _int(_get(p, "partition_index")),
                            "start_offset": _int(_get(p, "start_offset")), "error_code": _int(_get(p, "error_code"))})
    return out


def extract(api_key: int, request: Any, response: Any) -> dict[str, Any]:
    """The typed columns of one exchange from its decoded bodies (kio dataclasses) or
    their JSON documents (dicts); None bodies give nulls."""
    out: dict[str, Any] = {c: None for c in COLUMNS}
    out["share_start_offsets"] = []
    if api_key in _ISOLATION_APIS:
        out["isolation_level"] = _int(_get(request, "isolation_level"))
    if api_key == ApiKey.END_TXN and request is not None:
        out["txn_committed"] = bool(_get(request, "committed"))
    if api_key in _GRANT_APIS:
        out["granted_producer_id"] = _int(_get(response, "producer_id"))
        out["granted_producer_epoch"] = _int(_get(response, "producer_epoch"))
    if api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
        out["share_start_offsets"] = _start_offsets(response)
    return out


def _doc(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def from_json(api_key: int | None, request_json: str | None, response_json: str | None) -> dict[str, Any]:
    """`extract` over a version-1 row's JSON columns (the migration path)."""
    if api_key is None:
        return extract(-1, None, None)
    return extract(api_key, _doc(request_json), _doc(response_json))
