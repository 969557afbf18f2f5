"""Tiny hand-made traces for the `kipcheck diff` tests (imported by test_diff_*.py).

`exchange(**fields)` is one trace row with every schema column (defaults: an ok exchange
with nothing in it); `write_trace(dir, rows)` writes them as one completed segment with
the schema version metadata, as the recorder does.
"""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from replay import trace_schema as ts

TOPIC_ID = str(uuid.UUID(int=0x1234))


def exchange(seq: int, connection_id: int, api_key: int, api_name: str, **fields) -> dict:
    row = {name: None for name in ts.COLUMN_NAMES}
    for name, tp, _ in ts.FIELDS:
        if pa.types.is_list(tp):
            row[name] = []
    row.update(kind="exchange", seq=seq, connection_id=connection_id, api_key=api_key, api_name=api_name,
               api_version=fields.pop("api_version", 1), request_mono_ns=fields.pop("request_mono_ns", seq * 1000),
               request_wall_ms=seq, client_id=fields.pop("client_id", "client-1"), status="ok",
               correlation_id=seq, payloads="keep")
    row.update(fields)
    return row


def partition(side: str = "response", topic: str | None = "t", topic_id: str | None = TOPIC_ID, p: int = 0, **nums) -> dict:
    entry = {"side": side, "topic": topic, "topic_id": topic_id, "partition": p, "error_code": 0}
    for n in ("fetch_offset", "base_offset", "committed_offset", "offset", "high_watermark", "last_stable_offset",
              "log_start_offset", "leader_epoch"):
        entry[n] = nums.get(n)
    if "error_code" in nums:
        entry["error_code"] = nums["error_code"]
    return entry


def write_trace(directory: str, rows: list[dict], name: str = "trace-20260101T000000-1-1.parquet",
                version: int = ts.SCHEMA_VERSION) -> str:
    os.makedirs(directory, exist_ok=True)
    schema = ts.schema()
    if version != ts.SCHEMA_VERSION:
        md = dict(schema.metadata)
        md[ts.META_SCHEMA_VERSION] = str(version).encode()
        schema = schema.with_metadata(md)
    path = os.path.join(directory, name)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def small_workload(pid: int = 1000, member: str = "m-a", hwm: int = 10, epoch: int = 0, lock_ms: int = 30000,
                   topic_id: str = TOPIC_ID) -> list[dict]:
    """A little transactional + share-group session on two connections."""
    return [
        exchange(1, 7, 18, "api_versions", error_code=0),
        exchange(2, 7, 3, "metadata", partitions=[partition(topic_id=topic_id, leader_epoch=0)]),
        exchange(3, 8, 22, "init_producer_id", client_id="producer", error_code=0, producer_id=pid,
                 producer_epoch=epoch, response_json=json.dumps({"throttle_time": 0, "error_code": 0,
                                                                 "producer_id": pid, "producer_epoch": epoch})),
        exchange(4, 8, 0, "produce", client_id="producer", producer_id=pid, producer_epoch=epoch,
                 partitions=[partition(base_offset=0)]),
        exchange(5, 7, 1, "fetch", partitions=[partition(topic=None, topic_id=topic_id, high_watermark=hwm,
                                                         last_stable_offset=hwm, log_start_offset=0)]),
        exchange(6, 9, 76, "share_group_heartbeat", client_id="share", member_id=member, member_epoch=1,
                 error_code=0, response_json=json.dumps({"member_id": member, "member_epoch": 1,
                                                         "heartbeat_interval_ms": 5000})),
        exchange(7, 9, 78, "share_fetch", client_id="share", member_id=member, share_session_epoch=0,
                 error_code=0, acquired_records=[{"topic_id": topic_id, "partition": 0, "first_offset": 0,
                                                  "last_offset": hwm - 1, "delivery_count": 1}],
                 response_json=json.dumps({"acquisition_lock_timeout_ms": lock_ms, "error_code": 0})),
    ]
