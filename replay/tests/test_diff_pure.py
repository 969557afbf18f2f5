"""`kipcheck diff` rules on tiny hand-made traces (pure-Python engine)."""

from __future__ import annotations

import json
import uuid

from registers.catalog import load_catalog
from replay import diff_fields as f
from replay import diff_pure
from replay.diff_input import inspect_trace
from replay.tests.test_diff_support import TOPIC_ID, exchange, partition, small_workload, write_trace


def run(tmp_path, a_rows, b_rows, noise_rows=None, with_json=True):
    write_trace(str(tmp_path / "a"), a_rows)
    write_trace(str(tmp_path / "b"), b_rows)
    noise = None
    if noise_rows is not None:
        write_trace(str(tmp_path / "n"), noise_rows)
        noise = inspect_trace(str(tmp_path / "n"))
    table, result = diff_pure.run(inspect_trace(str(tmp_path / "a")), inspect_trace(str(tmp_path / "b")), noise,
                                  with_json)
    return table.to_pylist(), result


def real(rows):
    return [r for r in rows if not r["noise"]]


def test_rerun_with_other_ids_has_no_divergence(tmp_path) -> None:
    rows, result = run(tmp_path, small_workload(), small_workload(pid=77, member="other", topic_id=str(uuid.uuid4())))
    assert rows == []
    assert result["alignment"]["pairs_connection"] == 7


def test_response_difference_is_reported_with_path_and_requirement(tmp_path) -> None:
    rows, _ = run(tmp_path, small_workload(hwm=10), small_workload(hwm=12))
    by_path = {r["path"]: r for r in rows}
    hw = by_path["partitions[0].high_watermark"]
    assert (hw["a_value"], hw["b_value"], hw["api_name"], hw["a_seq"]) == ("10", "12", "fetch", 5)
    assert hw["field"] == "partitions[].high_watermark" and hw["requirement_ids"] == ["PROTO.FETCH.001"]
    assert by_path["partitions[0].last_stable_offset"]["requirement_ids"] == ["KIP-98.LSO.001"]
    assert by_path["acquired_records[0].last_offset"]["b_value"] == "11"
    assert set(by_path) == {"partitions[0].high_watermark", "partitions[0].last_stable_offset",
                            "acquired_records[0].last_offset"}


def test_producer_id_structure_is_compared_not_the_values(tmp_path) -> None:
    def two_producers(pid1, pid2):
        return [exchange(1, 1, 22, "init_producer_id", producer_id=pid1, producer_epoch=0),
                exchange(2, 2, 22, "init_producer_id", client_id="client-2", producer_id=pid2, producer_epoch=0),
                exchange(3, 1, 0, "produce", producer_id=pid1, producer_epoch=0)]
    assert run(tmp_path / "same", two_producers(5, 6), two_producers(900, 901))[0] == []
    # B hands the second producer the first one's id: the structure differs
    rows, _ = run(tmp_path / "reused", two_producers(5, 6), two_producers(900, 900))
    assert [(r["a_seq"], r["path"], r["a_value"], r["b_value"]) for r in rows] == [
        (2, "producer_id", "<producer_id#2>", "<producer_id#1>")]
    assert rows[0]["requirement_ids"] == ["KIP-98.IDEMP.001", "KIP-98.INIT.001"]


def test_sentinels_are_kept(tmp_path) -> None:
    a = [exchange(1, 1, 22, "init_producer_id", producer_id=-1, producer_epoch=-1, error_code=53)]
    b = [exchange(1, 1, 22, "init_producer_id", producer_id=4000, producer_epoch=0, error_code=0)]
    rows, _ = run(tmp_path, a, b)
    got = {r["path"]: (r["a_value"], r["b_value"]) for r in rows}
    assert got == {"producer_id": ("-1", "<producer_id#1>"), "producer_epoch": ("-1", "0"), "error_code": ("53", "0")}
    assert {r["a_error_code"] for r in rows} == {53}


def test_topic_ids_are_named_when_the_trace_names_them(tmp_path) -> None:
    other = str(uuid.uuid4())
    a = [exchange(1, 1, 3, "metadata", partitions=[partition(topic="orders", topic_id=TOPIC_ID)]),
         exchange(2, 1, 1, "fetch", partitions=[partition(topic=None, topic_id=TOPIC_ID)])]
    b_same = [exchange(1, 1, 3, "metadata", partitions=[partition(topic="orders", topic_id=other)]),
              exchange(2, 1, 1, "fetch", partitions=[partition(topic=None, topic_id=other)])]
    assert run(tmp_path / "same", a, b_same)[0] == []
    b_swapped = [exchange(1, 1, 3, "metadata", partitions=[partition(topic="payments", topic_id=other)]),
                 exchange(2, 1, 1, "fetch", partitions=[partition(topic=None, topic_id=other)])]
    rows, _ = run(tmp_path / "renamed", a, b_swapped)
    assert {(r["a_seq"], r["path"], r["a_value"], r["b_value"]) for r in rows} == {
        (1, "partitions[0].topic", "orders", "payments"),
        (1, "partitions[0].topic_id", "<topic_id:orders>", "<topic_id:payments>"),
        (2, "partitions[0].topic_id", "<topic_id:orders>", "<topic_id:payments>")}


def test_list_length_difference_reports_missing_elements(tmp_path) -> None:
    a = [exchange(1, 1, 1, "fetch", partitions=[partition(p=0), partition(p=1)])]
    b = [exchange(1, 1, 1, "fetch", partitions=[partition(p=0)])]
    rows, _ = run(tmp_path, a, b)
    assert {(r["path"], r["b_value"]) for r in rows} >= {("partitions[1].partition", f.MISSING_VALUE)}
    assert all(r["path"].startswith("partitions[1].") for r in rows)


def test_extra_exchange_shifts_only_its_own_api(tmp_path) -> None:
    a = [exchange(1, 1, 3, "metadata"), exchange(2, 1, 0, "produce", error_code=0), exchange(3, 1, 1, "fetch", error_code=0),
         exchange(4, 1, 0, "produce", error_code=0)]
    b = [exchange(1, 1, 3, "metadata"), exchange(2, 1, 0, "produce", error_code=0), exchange(3, 1, 3, "metadata", error_code=3),
         exchange(4, 1, 1, "fetch", error_code=0), exchange(5, 1, 0, "produce", error_code=0)]
    rows, result = run(tmp_path, a, b)
    assert [(r["kind"], r["b_seq"], r["field"]) for r in rows] == [(f.KIND_ONLY_B, 3, f.EXCHANGE_FIELD)]
    assert result["alignment"]["pairs_connection"] == 4


def test_discovery_requests_align_by_what_they_ask(tmp_path) -> None:
    """An extra brokers-only Metadata (client timing) neither shifts the Metadata requests
    for a topic nor counts: discovery requests align by their fingerprint, and an unaligned
    one answered without error is noise by rule."""
    a = [exchange(1, 1, 3, "metadata", topics=["t"]), exchange(2, 1, 3, "metadata", topics=["t", "u"])]
    b = [exchange(1, 1, 3, "metadata", topics=["t"]), exchange(2, 1, 3, "metadata", topics=[], error_code=0),
         exchange(3, 1, 3, "metadata", topics=["u", "t"])]
    rows, result = run(tmp_path, a, b)
    assert [(r["b_seq"], r["field"], r["noise"]) for r in rows] == [(2, f.IDLE_POLL_FIELD, True)]
    assert result["alignment"]["pairs_connection"] == 2


def test_connections_opened_in_another_order_align_by_client(tmp_path) -> None:
    a = [exchange(1, 1, 3, "metadata"), exchange(2, 2, 0, "produce")]
    b = [exchange(1, 2, 0, "produce"), exchange(2, 1, 3, "metadata")]
    rows, result = run(tmp_path, a, b)
    assert rows == []
    assert result["alignment"]["pairs_client"] == 2


def test_unaligned_empty_poll_is_noise_by_rule(tmp_path) -> None:
    a = [exchange(1, 1, 1, "fetch", error_code=0)]
    b = [exchange(1, 1, 1, "fetch", error_code=0), exchange(2, 1, 1, "fetch", error_code=0),
         exchange(3, 1, 1, "fetch", error_code=0, batches=[{"side": "response", "partition": 0, "base_offset": 0}])]
    rows, _ = run(tmp_path, a, b)
    got = sorted((r["b_seq"], r["field"], r["noise"]) for r in rows)
    assert got == [(2, f.IDLE_POLL_FIELD, True), (3, f.EXCHANGE_FIELD, False)]


def test_json_fields_are_normalized_and_compared(tmp_path) -> None:
    def hb(interval, throttle, member):
        doc = {"throttle_time": throttle, "error_code": 0, "member_id": member, "heartbeat_interval": interval,
               "assignment": {"topic_partitions": [{"topic_id": member + "-t", "partitions": [0]}]}}
        return [exchange(1, 1, 76, "share_group_heartbeat", error_code=0, response_json=json.dumps(doc))]
    assert run(tmp_path / "same", hb(5000, 0, "m1"), hb(5000, 30, "m2"))[0] == []
    rows, _ = run(tmp_path / "other", hb(5000, 0, "m1"), hb(4000, 0, "m2"))
    assert [(r["path"], r["a_value"], r["b_value"], r["requirement_ids"]) for r in rows] == [
        ("json:heartbeat_interval", "5000", "4000", ["KIP-932.HB.004"])]
    assert run(tmp_path / "nojson", hb(5000, 0, "m1"), hb(4000, 0, "m2"), with_json=False)[0] == []


def test_noise_learned_from_a_second_run_is_suppressed_and_reported(tmp_path) -> None:
    a = small_workload(lock_ms=30000)
    a2 = small_workload(pid=5, member="x", lock_ms=29000)  # the lock timeout varies between runs: noise
    b = small_workload(pid=6, member="y", lock_ms=15000, hwm=11)
    rows, result = run(tmp_path, a, b, noise_rows=a2)
    noise = [r for r in rows if r["noise"]]
    assert [r["field"] for r in noise] == ["json:acquisition_lock_timeout_ms"]
    assert {r["field"] for r in real(rows)} == {"partitions[].high_watermark", "partitions[].last_stable_offset",
                                                "acquired_records[].last_offset"}
    assert result["noise"] == [{"api_name": "share_fetch", "field": "json:acquisition_lock_timeout_ms",
                                "differing": 1, "compared": 1, "rate": 1.0}]
    groups = {(g["api_name"], g["field"], g["noise"]) for g in result["groups"]}
    assert ("share_fetch", "json:acquisition_lock_timeout_ms", True) in groups


def test_summary_groups_carry_counts_and_samples(tmp_path) -> None:
    a = [exchange(i, 1, 1, "fetch", partitions=[partition(high_watermark=i)]) for i in range(1, 6)]
    b = [exchange(i, 1, 1, "fetch", partitions=[partition(high_watermark=i + 1)]) for i in range(1, 6)]
    _, result = run(tmp_path, a, b)
    (g,) = result["groups"]
    assert (g["api_name"], g["field"], g["count"], g["exchanges"]) == ("fetch", "partitions[].high_watermark", 5, 5)
    assert [s["a_seq"] for s in g["samples"]] == [1, 2, 3]


def test_fmt_and_generic_field() -> None:
    assert f.fmt(None, "int") == "null" and f.fmt(True, "bool") == "true"
    assert f.fmt([3, 1], "bag") == "[1,3]" and f.fmt([3, 1], "seq") == "[3,1]"
    assert f.generic_field("batches[12].producer_id") == "batches[].producer_id"
    assert f.generic_field("json:responses[0].partitions[3].x") == "json:responses[].partitions[].x"


def test_every_requirement_id_in_the_rules_is_in_the_catalog() -> None:
    known = set(load_catalog().requirements)
    used = {i for _, _, ids in f.REQUIREMENT_RULES for i in ids}
    assert used and used <= known, sorted(used - known)
    assert f.requirements_for("init_producer_id", "producer_epoch") == ["KIP-98.INIT.001"]
    assert f.requirements_for("share_fetch", "acquired_records[].delivery_count")[0] == "KIP-932.STATE.003"
    assert f.requirements_for("unknown_api", "x") == []
