"""Small synthetic results directories (rows, run.json, catalog, allure files) for the
report tests: passing, interrupted and unreachable-target runs, no broker needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CATALOG = {
    "kip-98.yaml": """\
kip: KIP-98
title: Exactly Once Delivery and Transactional Messaging
seed: null
status: adopted
requirements:
  - id: KIP-98.TXN.001
    section: Transactions
    level: must
    behaviour: Aborted records are invisible to read_committed consumers.
    oracle: Abort a transaction, then fetch read_committed; no record of it is returned.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.002
    section: Transactions
    level: must
    behaviour: EndTxn with a stale epoch is fenced.
    oracle: Bump the epoch with InitProducerId, then EndTxn with the old epoch; INVALID_PRODUCER_EPOCH.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
  - id: KIP-98.TXN.003
    section: Transactions
    level: should
    behaviour: Transaction timeouts abort.
    oracle: Let a transaction time out; it is aborted.
    implemented_in: {apache-kafka: ">=0.11.0", reference: true}
""",
    "kip-932.yaml": """\
kip: KIP-932
title: Queues for Kafka
seed: null
status: adopted
requirements:
  - id: KIP-932.SHARE.001
    section: Share groups
    level: must
    behaviour: A share group delivers each record to one member at a time.
    oracle: Two members, count deliveries.
    implemented_in: {apache-kafka: ">=4.1", reference: true}
""",
}

TARGET = "kafka-native:4.1"


def row(nodeid: str, reqs: list[str], verdict: str = "pass", target: str | None = TARGET, **extra: Any) -> dict:
    return {
        "nodeid": nodeid, "test": nodeid.rsplit("::", 1)[-1].split("[")[0], "suite": "kip98",
        "target": target, "target_kind": target.split(":")[0] if target else None,
        "target_version": "4.1.0" if target else None, "requirements": reqs, "verdict": verdict,
        "reason": extra.pop("reason", None), "duration_s": extra.pop("duration_s", 0.5), "divergences": [], **extra,
    }


PASSING_ROWS = [
    row("kip98/test_txn.py::test_abort_invisible[kafka-native:4.1]", ["KIP-98.TXN.001"], start=1000.0, stop=1001.2),
    row("kip98/test_txn.py::test_fenced[kafka-native:4.1]", ["KIP-98.TXN.002"], start=1001.3, stop=1001.9),
    row("kip98/test_txn.py::test_timeout[kafka-native:4.1]", ["KIP-98.TXN.003"], start=1002.0, stop=1004.5),
    row("kip932/test_share.py::test_one_member[kafka-native:4.1]", ["KIP-932.SHARE.001"], start=1000.1, stop=1003.0,
        worker="gw1"),
    row("model/test_model.py::test_txn_model", ["KIP-98.TXN.001"], target=None),
]

FAILURE_EVIDENCE = {
    "assertion": "AssertionError: EndTxn with epoch 3 after the bump to 4 answered NONE, expected "
                 "INVALID_PRODUCER_EPOCH\nassert 0 == 47",
    "exchanges": [{"api": "EndTxn", "api_key": 26, "version": 4, "node": 1,
                   "request": "EndTxnRequest(transactional_id='kc-t1', producer_id=7, producer_epoch=3, committed=True)",
                   "response": "EndTxnResponse(throttle_time_ms=0, error_code=0)"}],
    "observation": "reference answered INVALID_PRODUCER_EPOCH (47); target answered NONE (0)",
    "log_tail": ["[2026-11-26 00:00:01] INFO [TransactionCoordinator id=1] completed EndTxn"],
    "log_path": "/tmp/kafka-native-1/server.log",
}


def run_json(status: str = "complete", expected: int = 5, finished: int = 5, **extra: Any) -> dict:
    base = {
        "schema": 1, "status": status, "reasons": [], "interrupted": None, "unreachable_targets": {},
        "scope": {"narrowed": False, "suite_exprs": [], "keyword": None, "explicit_tests": [],
                  "collected": expected, "selected": expected, "deselected": 0},
        "expected_tests": expected, "finished_tests": finished, "timed_out": [], "worker_crashes": [],
        "started_at": "2026-11-26T00:00:00+00:00", "finished_at": "2026-11-26T00:00:05+00:00", "duration_s": 5.0,
        "command": ["kipcheck", "certify", "--target", TARGET],
        "kipcheck": {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567"},
        "clients": {"confluent_kafka": "2.16.1", "librdkafka": "2.16.0", "kio": "0.6.5"},
        "targets": {TARGET: {"cluster_id": "MkU3OEVBNTcwNTJENDM2Qg", "broker_version": "4.1.0",
                             "finalized_features": {"transaction.version": 2, "share.version": 1},
                             "bootstrap": "127.0.0.1:9092", "security_protocol": "PLAINTEXT"}},
    }
    base.update(extra)
    return base


def write_catalog(root: Path) -> Path:
    cat = root / "catalog"
    cat.mkdir(parents=True, exist_ok=True)
    for name, text in CATALOG.items():
        (cat / name).write_text(text, encoding="utf-8")
    return cat


def write_results(out: Path, rows: list[dict], run: dict | None) -> Path:
    """OUT/results/ with one jsonl per worker (rows' "worker", default gw0) and run.json."""
    results = out / "results"
    results.mkdir(parents=True, exist_ok=True)
    by_worker: dict[str, list[dict]] = {}
    for r in rows:
        r = dict(r)
        by_worker.setdefault(r.pop("worker", "gw0"), []).append(r)
    for w, rs in by_worker.items():
        with open(results / f"results-{w}.jsonl", "w", encoding="utf-8") as fh:
            for r in rs:
                fh.write(json.dumps(r) + "\n")
    if run is not None:
        (results / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return results


def passing(out: Path) -> Path:
    return write_results(out, PASSING_ROWS, run_json())


def interrupted(out: Path) -> Path:
    rows = [
        PASSING_ROWS[0],
        row("kip98/test_txn.py::test_fenced[kafka-native:4.1]", ["KIP-98.TXN.002"], "fail",
            reason="AssertionError: EndTxn with epoch 3 after the bump to 4 answered NONE, expected INVALID_PRODUCER_EPOCH",
            evidence=FAILURE_EVIDENCE, allure_uuid="u-fenced", start=1001.3, stop=1002.0),
    ]
    run = run_json("interrupted", expected=5, finished=2, reasons=["interrupted by SIGINT after 2 of 5 tests"],
                   interrupted={"signal": "SIGINT", "at": "2026-11-26T00:00:02+00:00"})
    return write_results(out, rows, run)


def unreachable(out: Path) -> Path:
    run = run_json("target_unreachable", expected=4, finished=0,
                   reasons=["kafka-native:4.1 did not answer ApiVersions at 127.0.0.1:9092"],
                   unreachable_targets={TARGET: "connection refused at 127.0.0.1:9092"})
    return write_results(out, [], run)
