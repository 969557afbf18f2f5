"""Normalizing scenario observations so two clusters' answers can be compared.

Values that legitimately differ between clusters (producer ids, member ids, topic ids,
cluster ids, node ids, timestamps, hosts and ports) are replaced by stable placeholders
numbered in order of first appearance: ``<producer_id#1>``, ``<producer_id#2>``... The
numbering keeps the *structure* (the same producer id seen twice stays the same
placeholder; two different ids stay different) while dropping the values. Sentinels that
carry meaning (-1 "none", the all-zero UUID, the empty member id) are kept as they are.

Traversal order is deterministic (mapping keys sorted), so two observations built by the
same scenario code number their placeholders the same way.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import math
import re
import uuid
from typing import Any, Iterable, Mapping

__all__ = [
    "DEFAULT_CATEGORIES",
    "DEFAULT_IGNORED_KEYS",
    "Difference",
    "Normalizer",
    "compare",
    "jsonable",
    "normalize",
]


def canonical_key(key: str) -> str:
    """producerId, producer_id, Producer-Id -> producerid."""
    return re.sub(r"[^a-z0-9]", "", str(key).lower())


# category -> canonical key names whose values belong to it
DEFAULT_CATEGORIES: dict[str, frozenset[str]] = {
    "producer_id": frozenset({"producerid", "pid"}),
    "member_id": frozenset({"memberid"}),
    "topic_id": frozenset({"topicid"}),
    "cluster_id": frozenset({"clusterid"}),
    "node_id": frozenset(
        {"nodeid", "leaderid", "coordinatorid", "brokerid", "controllerid", "replicanodes", "isrnodes", "offlinereplicas"}
    ),
    "host": frozenset({"host", "hostname", "advertisedhost"}),
    "port": frozenset({"port"}),
}
# canonical keys ignored entirely (removed before comparison)
DEFAULT_IGNORED_KEYS: frozenset[str] = frozenset({"throttletimems", "throttletime", "correlationid"})

_TIMESTAMP_EXACT = frozenset({"time", "createtime", "appendtime", "logappendtime"})
_ZERO_UUID_STRINGS = frozenset({str(uuid.UUID(int=0)), "AAAAAAAAAAAAAAAAAAAAAA"})
# IPv4 / localhost / bracketed IPv6, optionally with :port, inside any string
_ADDRESS_RE = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9A-Fa-f:]+\])(?::(\d{1,5}))?(?![\w])")


def _is_timestamp_key(ck: str) -> bool:
    return "timestamp" in ck or ck.endswith("timems") or ck in _TIMESTAMP_EXACT


def jsonable(value: Any) -> Any:
    """Turn observations into plain JSON types: dicts with str keys, lists, str, int,
    float, bool, None. Enums become their names, UUIDs strings, bytes ``b64:...``,
    timedeltas milliseconds, datetimes ISO strings, dataclasses dicts."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return repr(value)
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "b64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        ms = value.total_seconds() * 1000
        return int(ms) if ms == int(ms) else ms
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort(key=repr)
        return items
    return repr(value)


class Normalizer:
    """One normalization pass (placeholder numbering is per instance: use one per side).

    categories: category -> key names (any spelling; matched case/punctuation-insensitively)
    ignore_keys: keys dropped wherever they appear
    keep_keys: keys never normalized (overrides categories and timestamp detection)
    timestamps: normalize timestamp-like keys (``*timestamp*``, ``*_time_ms``)
    addresses: replace IPv4/localhost/[IPv6] addresses (and their ports) inside strings
    """

    def __init__(
        self,
        categories: Mapping[str, Iterable[str]] | None = None,
        ignore_keys: Iterable[str] = (),
        keep_keys: Iterable[str] = (),
        timestamps: bool = True,
        addresses: bool = True,
        extra_categories: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        cats = dict(DEFAULT_CATEGORIES if categories is None else categories)
        for name, keys in (extra_categories or {}).items():
            cats[name] = frozenset(cats.get(name, frozenset())) | frozenset(keys)
        self._key_category: dict[str, str] = {}
        for name, keys in cats.items():
            for k in keys:
                self._key_category[canonical_key(k)] = name
        self.ignore = frozenset(DEFAULT_IGNORED_KEYS | {canonical_key(k) for k in ignore_keys})
        self.keep = frozenset(canonical_key(k) for k in keep_keys)
        self.timestamps = timestamps
        self.addresses = addresses
        self._maps: dict[str, dict[Any, str]] = {}

    def placeholder(self, category: str, value: Any) -> str:
        table = self._maps.setdefault(category, {})
        key = (type(value).__name__, value) if not isinstance(value, (list, dict)) else repr(value)
        if key not in table:
            table[key] = f"<{category}#{len(table) + 1}>"
        return table[key]

    def category_of(self, key: str) -> str | None:
        ck = canonical_key(key)
        if ck in self.keep:
            return None
        cat = self._key_category.get(ck)
        if cat is not None:
            return cat
        if self.timestamps and _is_timestamp_key(ck):
            return "timestamp"
        return None

    def __call__(self, observations: Any) -> Any:
        return self._walk(jsonable(observations), None)

    # -- internals ------------------------------------------------------------------

    def _walk(self, value: Any, category: str | None) -> Any:
        if isinstance(value, dict):
            out = {}
            for k in sorted(value, key=str):
                if canonical_key(k) in self.ignore:
                    continue
                cat = self.category_of(k)
                out[k] = self._walk(value[k], cat if cat is not None else None)
            return out
        if isinstance(value, list):
            return [self._walk(v, category) for v in value]
        if category is not None:
            return self._scalar(value, category)
        if isinstance(value, str) and self.addresses:
            return self._addresses(value)
        return value

    def _scalar(self, value: Any, category: str) -> Any:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value < 0:
            return value  # -1 sentinels: no producer, no leader, no timestamp
        if category in ("member_id", "cluster_id") and value == "":
            return value
        if category == "topic_id" and value in _ZERO_UUID_STRINGS:
            return value
        if category == "host" and isinstance(value, str):
            return self.placeholder("host", value)
        if isinstance(value, str) and self.addresses and category not in ("producer_id", "member_id", "topic_id", "cluster_id"):
            replaced = self._addresses(value)
            if replaced != value:
                return replaced
        return self.placeholder(category, value)

    def _addresses(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            host = self.placeholder("host", m.group(1))
            if m.group(2) is None:
                return host
            return f"{host}:{self.placeholder('port', int(m.group(2)))}"

        return _ADDRESS_RE.sub(sub, text)


def normalize(observations: Any, **options: Any) -> Any:
    """Normalize one side's observations with a fresh `Normalizer(**options)`."""
    return Normalizer(**options)(observations)


@dataclasses.dataclass(frozen=True)
class Difference:
    """One place where two normalized observations differ. Missing values are
    represented by the string ``<missing>``."""

    path: str
    target: Any
    reference: Any

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "target": self.target, "reference": self.reference}


MISSING = "<missing>"
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.match(key) else f"{path}[{key!r}]"


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def compare(target: Any, reference: Any, path: str = "$") -> list[Difference]:
    """Differences between two normalized observations (deep; lists element-wise; a
    list length mismatch is reported once for the whole list)."""
    out: list[Difference] = []
    _compare(target, reference, path, out)
    return out


def _compare(a: Any, b: Any, path: str, out: list[Difference]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = _child(path, str(key))
            if key not in a:
                out.append(Difference(sub, MISSING, b[key]))
            elif key not in b:
                out.append(Difference(sub, a[key], MISSING))
            else:
                _compare(a[key], b[key], sub, out)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(Difference(path, a, b))
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", out)
        return
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        out.append(Difference(path, a, b))
        return
    if not _same_scalar(a, b):
        out.append(Difference(path, a, b))
