"""Rewriting the broker addresses a response hands to clients.

A client that bootstraps through the capture proxy must keep talking through it, so
every broker endpoint in a response is replaced by the proxy listener that fronts that
broker (kafka-proxy and Kroxylicious do the same). The APIs that carry endpoints:

* Metadata (3)            -> ``brokers[].host/port``
* FindCoordinator (10)    -> v0-3 top-level ``host/port``; v4+ ``coordinators[].host/port``
* DescribeCluster (60)    -> ``brokers[].host/port``
* Produce (0) v10+, Fetch (1) v16+, ShareFetch (78), ShareAcknowledge (79)
                          -> ``node_endpoints[].host/port`` (tagged on Produce/Fetch)

The walk is generic: any kio entity in those responses with ``host`` and ``port`` fields
is an endpoint. Endpoints with an empty host or a negative port (FindCoordinator errors)
are left alone.

Produce and Fetch responses are the bulk of the traffic, and their endpoints live only in a
top-level tagged field (KIP-951: the broker adds ``node_endpoints`` when it answers
NOT_LEADER_OR_FOLLOWER with a new leader). `may_carry_endpoints` proves their absence by
skipping the body with framing's size-checking walk (records are skipped, not parsed) and
reading the top-level tags, so the forwarding path decodes such a response only when the
tag is there.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable

from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import ApiKey

REWRITE_API_KEYS = frozenset({0, 1, 3, 10, 60, 78, 79})

Endpoint = tuple[str, int]


@lru_cache(maxsize=None)
def _endpoint_fields(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Fields of `cls` that are (or contain) entities, as (name, nested class, is_array)."""
    out = []
    for f in dataclasses.fields(cls):
        _, _, is_array, nested = framing._field_shape(f)
        if nested is not None and schema_has_endpoints(nested):
            out.append((f.name, nested, is_array))
    return tuple(out)


@lru_cache(maxsize=None)
def _is_endpoint(cls: type) -> bool:
    names = {f.name for f in dataclasses.fields(cls)}
    return "host" in names and "port" in names


@lru_cache(maxsize=None)
def schema_has_endpoints(cls: type) -> bool:
    if _is_endpoint(cls):
        return True
    for f in dataclasses.fields(cls):
        _, _, _, nested = framing._field_shape(f)
        if nested is not None and nested is not cls and schema_has_endpoints(nested):
            return True
    return False


def needs_rewrite_check(api_key: int, api_version: int) -> bool:
    """True when responses of this key/version may carry broker endpoints."""
    if api_key not in REWRITE_API_KEYS:
        return False
    try:
        return schema_has_endpoints(framing.response_schema(api_key, api_version))
    except framing.UnsupportedApi:
        return False


# APIs whose endpoints, if any, are only in top-level tagged fields (KIP-951)
TAGGED_ENDPOINT_API_KEYS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})


@lru_cache(maxsize=None)
def _tail_walk(api_key: int, api_version: int) -> tuple[tuple, frozenset[int]] | None:
    """(framing's skip program for the body without its top-level tags, the tags that hold
    endpoints), or None when the body cannot be proven endpoint-free without decoding."""
    if api_key not in TAGGED_ENDPOINT_API_KEYS:
        return None
    try:
        cls = framing.response_schema(api_key, api_version)
        if not cls.__flexible__:
            return None
        program = framing._program(cls, True)
    except (framing.UnsupportedApi, framing._Unguardable):
        return None
    for f in dataclasses.fields(cls):
        _, _, _, nested = framing._field_shape(f)
        if "tag" not in f.metadata and nested is not None and schema_has_endpoints(nested):
            return None  # an untagged endpoint field: decode
    tags = frozenset(f.metadata["tag"] for f in dataclasses.fields(cls)
                     if "tag" in f.metadata and framing._field_shape(f)[3] is not None
                     and schema_has_endpoints(framing._field_shape(f)[3]))
    return program[:-1], tags


def may_carry_endpoints(frame: bytes, api_key: int, api_version: int) -> bool:
    """False when this response frame (correlation id first, no size prefix) provably has
    no endpoint, so it can be forwarded without decoding; True means decode and look."""
    if not needs_rewrite_check(api_key, api_version):
        return False
    walk = _tail_walk(api_key, api_version)
    if walk is None:
        return True
    program, endpoint_tags = walk
    end = len(frame)
    try:
        pos = _skip_tags(frame, 4, end, ())  # response header v1: correlation id, tags
        pos = framing._run(program, frame, pos, end, True)
        return _skip_tags(frame, pos, end, endpoint_tags) != end
    except (framing.PayloadDecodeError, IndexError, _TagFound):
        return True


class _TagFound(Exception):
    pass


def _skip_tags(frame: bytes, pos: int, end: int, wanted: frozenset[int] | tuple) -> int:
    count, pos = framing._uvarint(frame, pos, end)
    for _ in range(count):
        tag, pos = framing._uvarint(frame, pos, end)
        if tag in wanted:
            raise _TagFound(tag)
        size, pos = framing._uvarint(frame, pos, end)
        pos += size
        if pos > end:
            raise framing.PayloadDecodeError("Buffer is exhausted")
    return pos


def _valid(host: Any, port: Any) -> bool:
    return isinstance(host, str) and bool(host) and isinstance(port, int) and port >= 0


def find_endpoints(entity: Any) -> list[Endpoint]:
    """Every (host, port) endpoint in a decoded response, in order, without duplicates."""
    found: list[Endpoint] = []

    def walk(e: Any) -> None:
        cls = type(e)
        if _is_endpoint(cls) and _valid(e.host, e.port):
            ep = (e.host, int(e.port))
            if ep not in found:
                found.append(ep)
        for name, _, is_array in _endpoint_fields(cls):
            value = getattr(e, name)
            if value is None:
                continue
            for item in value if is_array else (value,):
                walk(item)

    walk(entity)
    return found


def rewrite(entity: Any, mapping: Callable[[Endpoint], Endpoint | None]) -> tuple[Any, int]:
    """Return (new entity, number of endpoints replaced). `mapping` returns None to keep one."""
    count = 0

    def walk(e: Any) -> Any:
        nonlocal count
        cls = type(e)
        changes: dict[str, Any] = {}
        if _is_endpoint(cls) and _valid(e.host, e.port):
            new = mapping((e.host, int(e.port)))
            if new is not None and new != (e.host, int(e.port)):
                changes["host"] = new[0]
                changes["port"] = type(e.port)(new[1])
                count += 1
        for name, _, is_array in _endpoint_fields(cls):
            value = getattr(e, name)
            if value is None:
                continue
            if is_array:
                items = tuple(walk(item) for item in value)
                if any(a is not b for a, b in zip(items, value)):
                    changes[name] = items
            else:
                item = walk(value)
                if item is not value:
                    changes[name] = item
        return dataclasses.replace(e, **changes) if changes else e

    return walk(entity), count
