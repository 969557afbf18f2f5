"""Normalizer, comparison and the differential runner (no cluster needed)."""

from __future__ import annotations

import datetime
import enum
import uuid
from dataclasses import dataclass

import pytest

from conformance.differential import Differential, UniqueIds, run_differential, safe_name
from clients.normalize import Difference, Normalizer, compare, jsonable, normalize
from targets.target import NotSupportedByTarget, Target, parse_target_spec

# -- normalizer ---------------------------------------------------------------------------------


def test_producer_ids_become_placeholders_in_order_of_first_appearance():
    obs = {"a": {"producer_id": 4000}, "b": [{"producerId": 17}, {"producer_id": 4000}], "c": {"pid": 17}}
    assert normalize(obs) == {
        "a": {"producer_id": "<producer_id#1>"},
        "b": [{"producerId": "<producer_id#2>"}, {"producer_id": "<producer_id#1>"}],
        "c": {"pid": "<producer_id#2>"},
    }


def test_sentinels_are_kept():
    zero = str(uuid.UUID(int=0))
    obs = {"producer_id": -1, "member_id": "", "topic_id": zero, "timestamp": -1, "leader_id": -1}
    assert normalize(obs) == obs


def test_each_category_is_normalized():
    tid = uuid.uuid4()
    obs = {
        "member_id": "consumer-1-4f2a",
        "topic_id": tid,
        "cluster_id": "MkU3OEVBNTcwNTJENDM2Qk",
        "timestamp": 1_700_000_000_123,
        "log_append_time_ms": 1_700_000_000_999,
        "node_id": 3,
        "replica_nodes": [3, 1],
        "host": "broker-7.example",
        "port": 39092,
        "offset": 42,
        "error_code": 0,
    }
    assert normalize(obs) == {
        "member_id": "<member_id#1>",
        "topic_id": "<topic_id#1>",
        "cluster_id": "<cluster_id#1>",
        "timestamp": "<timestamp#2>",  # keys are visited sorted: log_append_time_ms first
        "log_append_time_ms": "<timestamp#1>",
        "node_id": "<node_id#1>",
        "replica_nodes": ["<node_id#1>", "<node_id#2>"],
        "host": "<host#1>",
        "port": "<port#1>",
        "offset": 42,
        "error_code": 0,
    }


def test_addresses_inside_strings_share_host_and_port_placeholders():
    obs = {"bootstrap": "127.0.0.1:40001,127.0.0.1:40002", "error": "cannot reach localhost:40002", "port": 40001}
    assert normalize(obs) == {
        "bootstrap": "<host#1>:<port#1>,<host#1>:<port#2>",
        "error": "cannot reach <host#2>:<port#2>",
        "port": "<port#1>",
    }


def test_ignore_and_keep_keys():
    obs = {"throttle_time_ms": 5, "producer_id": 9, "timestamp": 1000, "noise": {"x": 1}, "value": "v"}
    out = normalize(obs, ignore_keys=["noise"], keep_keys=["timestamp"])
    assert out == {"producer_id": "<producer_id#1>", "timestamp": 1000, "value": "v"}
    assert Normalizer(timestamps=False)({"timestamp": 5}) == {"timestamp": 5}
    assert Normalizer(addresses=False)({"s": "127.0.0.1:1"}) == {"s": "127.0.0.1:1"}
    assert Normalizer(extra_categories={"txn_id": ["transactional_id"]})({"transactionalId": "t-1"}) == {
        "transactionalId": "<txn_id#1>"
    }


def test_numbering_is_independent_of_key_insertion_order():
    a = {"z": {"producer_id": 1}, "a": {"producer_id": 2}}
    b = {"a": {"producer_id": 7}, "z": {"producer_id": 8}}
    assert normalize(a) == normalize(b)


def test_same_structure_from_two_clusters_compares_equal_and_real_differences_remain():
    target = {"init": {"producer_id": 1000, "producer_epoch": 0}, "produce": {"producer_id": 1000, "base_offset": 0}}
    reference = {"init": {"producer_id": 1, "producer_epoch": 0}, "produce": {"producer_id": 1, "base_offset": 0}}
    assert compare(normalize(target), normalize(reference)) == []
    # a structural difference (second produce used a different producer id) survives
    reference["produce"]["producer_id"] = 2
    assert compare(normalize(target), normalize(reference)) == [
        Difference("$.produce.producer_id", "<producer_id#1>", "<producer_id#2>")
    ]


class Code(enum.IntEnum):
    none = 0
    unstable_offset_commit = 88


@dataclass(frozen=True)
class Entity:
    error_code: Code
    payload: bytes
    throttle: datetime.timedelta


def test_jsonable():
    value = {
        "e": Entity(Code.unstable_offset_commit, b"\x00\x01", datetime.timedelta(milliseconds=5)),
        "t": (1, 2),
        "s": {3, 1},
        "u": uuid.UUID(int=1),
        "f": float("nan"),
        1: "int key",
    }
    assert jsonable(value) == {
        "e": {"error_code": "unstable_offset_commit", "payload": "b64:AAE=", "throttle": 5},
        "t": [1, 2],
        "s": [1, 3],
        "u": "00000000-0000-0000-0000-000000000001",
        "f": "nan",
        "1": "int key",
    }


def test_compare_reports_paths():
    a = {"a": 1, "b": [1, 2], "c": {"d": True}, "weird key": 1, "only_a": 0, "l": [{"x": 1}]}
    b = {"a": 1.0, "b": [1, 2, 3], "c": {"d": 1}, "weird key": 2, "only_b": 0, "l": [{"x": 2}]}
    assert compare(a, b) == [
        Difference("$.b", [1, 2], [1, 2, 3]),
        Difference("$.c.d", True, 1),
        Difference("$.l[0].x", 1, 2),
        Difference("$.only_a", 0, "<missing>"),
        Difference("$.only_b", "<missing>", 0),
        Difference("$['weird key']", 1, 2),
    ]
    assert compare({"a": {"b": 1}}, {"a": [1]}) == [Difference("$.a", {"b": 1}, [1])]
    assert compare("x", "x") == []


# -- unique ids -------------------------------------------------------------------------------------


def test_unique_ids_are_kafka_safe_and_repeatable():
    a, b = UniqueIds("kc-gw0-test_x[reference]-1"), UniqueIds("kc-gw0-test_x[reference]-1")
    names = [a.topic(), a.topic(), a.group(), a.transactional_id(), a("share group")]
    assert names == [b.topic(), b.topic(), b.group(), b.transactional_id(), b("share group")]
    assert names[0] == "kc-gw0-test_x_reference_-1-topic-1"
    assert names[1].endswith("-topic-2") and names[4].endswith("-share_group-1")
    assert all(len(n) <= 249 and set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for n in names)
    long = safe_name("t" * 500, limit=60)
    assert len(long) == 60 and long != safe_name("t" * 499, limit=60)


# -- differential runner -------------------------------------------------------------------------------


class FakeTarget(Target):
    def __init__(self, spec: str, producer_id: int = 1000, error_code: int = 0) -> None:
        super().__init__(parse_target_spec(spec))
        self.producer_id, self.error_code, self.calls = producer_id, error_code, []

    @property
    def bootstrap_servers(self) -> str:
        return "127.0.0.1:9092"

    def start(self) -> None: ...

    def stop(self) -> None: ...


def scenario(target: FakeTarget, ids: UniqueIds) -> dict:
    topic = ids.topic()
    target.calls.append(topic)
    return {"topic": topic, "producer_id": target.producer_id, "error_code": target.error_code}


def test_run_differential_compares_normalized_observations():
    t, r = FakeTarget("kafka-native:4.1.0", 4000), FakeTarget("reference", 1)
    res = run_differential(scenario, t, r, ids_base="base", requirement="R.X.001")
    assert res.compared and res.differences == [] and not res.diverged
    assert t.calls == r.calls == ["base-topic-1"]  # same names on both sides
    assert res.target["producer_id"] == 4000 and res.reference["producer_id"] == 1  # raw observations


def test_run_differential_reports_differences_as_divergences():
    t, r = FakeTarget("kafka-native:4.1.0", error_code=88), FakeTarget("reference", error_code=85)
    res = run_differential(scenario, t, r, requirement="KIP-447.FETCH.001")
    assert res.divergences() == [
        {"requirement": "KIP-447.FETCH.001", "what": "scenario $.error_code", "target": 88, "reference": 85}
    ]


def test_reference_failures_do_not_propagate():
    t = FakeTarget("kafka-native:4.1.0")

    def failing_reference():
        raise RuntimeError("reference did not start")

    with pytest.warns(RuntimeWarning, match="reference did not start"):
        res = run_differential(scenario, t, failing_reference, requirement="R.X.001")
    assert not res.compared and res.reference is None
    assert res.differences == [Difference("$", "<ran>", "<reference run failed: RuntimeError: reference did not start>")]

    def unsupported(target, ids):
        if target.kind == "reference":
            raise NotSupportedByTarget("no share groups")
        return {"ok": True}

    with pytest.warns(RuntimeWarning):
        res = run_differential(unsupported, t, FakeTarget("reference"), requirement="R.X.001")
    assert res.note == "reference does not support this scenario: no share groups"


def test_target_failures_propagate():
    def boom(target, ids):
        raise NotSupportedByTarget("target lacks it")

    with pytest.raises(NotSupportedByTarget):
        run_differential(boom, FakeTarget("kafka-native:4.1.0"), FakeTarget("reference"))


def test_differential_fixture_object_records_and_skips():
    recorded: list[dict] = []
    t, r = FakeTarget("kafka-native:4.1.0", error_code=1), FakeTarget("reference", error_code=0)
    d = Differential(t, lambda: r, ids_base="kc-d", requirements=["R.X.001"], record=recorded.append)
    res = d.run(scenario)
    assert [x["what"] for x in recorded] == ["scenario $.error_code"] and res.requirement == "R.X.001"
    d.run(scenario)
    assert t.calls == ["kc-d1-topic-1", "kc-d2-topic-1"] == r.calls  # one id base per run
    with pytest.raises(ValueError, match="not among the test's requirement ids"):
        d.run(scenario, requirement="R.Y.001")

    multi = Differential(t, lambda: r, requirements=["R.X.001", "R.X.002"])
    with pytest.raises(ValueError, match="needs requirement="):
        multi.run(scenario)
    assert multi.run(scenario, requirement="R.X.002").requirement == "R.X.002"


def test_no_reference_run_when_disabled_or_target_is_reference():
    r = FakeTarget("reference")
    called = []

    def provider():
        called.append(1)
        return r

    off = Differential(FakeTarget("kafka-native:4.1.0"), provider, enabled=False, requirements=["R.X.001"])
    res = off.run(scenario)
    assert res.note == "differential comparison disabled (--no-differential)" and not res.compared
    same = Differential(FakeTarget("reference:nodes=3"), provider, requirements=["R.X.001"])
    assert same.run(scenario).note == "target is the reference"
    assert called == [] and r.calls == []
