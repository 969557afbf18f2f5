"""Round trips and latency per transaction with and without the draft round-trip KIP, on the
reference: ``python -m benchmarks.run --suite txnrt [--quick] [--transactions N]
[--partitions P] [--marker-delay-ms 0,50] [--json OUT]``.

Every mode runs the same TV1 loop with the reference TransactionalProducer: begin, then for
each of P output partitions send one record and flush it (a partition is discovered when its
first record is sent, as a producer learns its outputs while processing), commit; the next
transaction starts as soon as the commit returns, i.e. while the previous markers are still
pending. Modes:

  today       transaction.roundtrip.version 0, begin_transaction(): an AddPartitionsToTxn per
              new partition, CONCURRENT_TRANSACTIONS retries while the previous markers are
              written (Kafka's behaviour);
  blocking    level 1, begin_transaction(): the first add of a transaction is held instead;
  prereg      level 0, begin_transaction(partitions): one add at begin, still retried;
  draft       level 1 and begin_transaction(partitions): both halves of the draft.

Modes run interleaved in chunks on one in-process ThreadedReferenceCluster, so that they see
the same machine load. `marker delay` is the reference's model-only
TransactionConfig.marker_delay_ms: 0 writes markers at the broker's next 20 ms tick.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.model import txn_roundtrip
from reference_impl.server.broker_server import ThreadedReferenceCluster
from clients.wire import create_topic as create
from reference_impl.client.raw_client import ClusterClient

MODES = {"today": (0, False), "blocking": (1, False), "prereg": (0, True), "draft": (1, True)}
COLUMNS = ("mode", "marker delay ms", "txns", "requests/txn", "AddPartitions/txn", "CONCURRENT_TXN/txn",
           "p50 ms", "p99 ms", "txn/s")
CHUNK = 10


@dataclass
class Row:
    mode: str
    marker_delay_ms: int
    latencies_ms: list[float] = field(default_factory=list)
    requests: int = 0
    adds: int = 0
    concurrent: int = 0

    def summary(self) -> dict[str, Any]:
        n = len(self.latencies_ms)
        lat = sorted(self.latencies_ms)
        return {
            "mode": self.mode, "marker_delay_ms": self.marker_delay_ms, "transactions": n,
            "requests_per_txn": self.requests / n if n else None, "adds_per_txn": self.adds / n if n else None,
            "concurrent_per_txn": self.concurrent / n if n else None,
            "p50_ms": statistics.median(lat) if lat else None,
            "p99_ms": lat[min(n - 1, int(n * 0.99))] if lat else None,
            "txn_per_s": n / (sum(lat) / 1000) if lat else None,
        }


def _on_loop(cluster: ThreadedReferenceCluster, fn: Any) -> Any:
    async def run() -> Any:
        return fn(cluster.cluster.state)

    return cluster.call(run())


def configure(cluster: ThreadedReferenceCluster, level: int, marker_delay_ms: int) -> None:
    """The blocking level and the marker delay, set on the broker's event loop (a benchmark,
    not a test: the suite flips the level with UpdateFeatures)."""
    def apply(state: Any) -> None:
        state.config.finalized_features[txn_roundtrip.FEATURE] = level
        state.transactions.txn_config.marker_delay_ms = marker_delay_ms

    _on_loop(cluster, apply)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with ClusterClient(bootstrap) as cc:
        assert create(cc, topic, partitions) == 0


def run_chunk(p: TransactionalProducer, row: Row, topic: str, partitions: int, pre_register: bool, n: int) -> None:
    outputs = [(topic, i) for i in range(partitions)]
    for _ in range(n):
        since = len(p.history)
        started = time.perf_counter()
        p.begin_transaction(outputs if pre_register else None)
        for tp in outputs:
            p.send(tp[0], tp[1], b"x" * 100)
            p.flush()
        p.commit_transaction()
        row.latencies_ms.append((time.perf_counter() - started) * 1000)
        reqs = [e for e in p.history[since:] if e["type"] == "request"]
        row.requests += len(reqs)
        row.adds += sum(e["api"] == "AddPartitionsToTxn" for e in reqs)
        row.concurrent += sum(e["error_code"] == 51 for e in reqs)
    del p.history[:]  # keep memory flat


def bench(transactions: int, partitions: int, delays: list[int]) -> list[Row]:
    rows: list[Row] = []
    with ThreadedReferenceCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = f"txnrt-bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions)
        for delay in delays:
            producers = {}
            for mode in MODES:
                producers[mode] = TransactionalProducer(bootstrap, f"txnrt-bench-{mode}-{uuid.uuid4().hex[:6]}",
                                                        transaction_version=1)
                producers[mode].init_transactions()
            by_mode = {mode: Row(mode, delay) for mode in MODES}
            done = 0
            while done < transactions:
                n = min(CHUNK, transactions - done)
                for mode, (level, pre_register) in MODES.items():
                    configure(cluster, level, delay)
                    run_chunk(producers[mode], by_mode[mode], topic, partitions, pre_register, n)
                done += n
            for p in producers.values():
                p.close()
            rows += by_mode.values()
    return rows


def _fmt(v: Any, digits: int = 2) -> str:
    return "—" if v is None else (f"{v:,.{digits}f}" if isinstance(v, float) else str(v))


def table(rows: list[Row]) -> str:
    data = [list(COLUMNS)]
    for r in rows:
        s = r.summary()
        data.append([s["mode"], str(s["marker_delay_ms"]), str(s["transactions"]), _fmt(s["requests_per_txn"]),
                     _fmt(s["adds_per_txn"]), _fmt(s["concurrent_per_txn"]), _fmt(s["p50_ms"]), _fmt(s["p99_ms"]),
                     _fmt(s["txn_per_s"], 1)])
    widths = [max(len(r[i]) for r in data) for i in range(len(COLUMNS))]
    lines = []
    for n, r in enumerate(data):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run --suite txnrt", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="50 transactions per mode (default 300)")
    p.add_argument("--transactions", type=int, help="transactions per mode and marker delay")
    p.add_argument("--partitions", type=int, default=4, help="output partitions per transaction (default 4)")
    p.add_argument("--marker-delay-ms", default="0,50", help="comma-separated marker delays (default 0,50)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    a = p.parse_args(argv)
    try:
        a.delays = [int(x) for x in a.marker_delay_ms.split(",") if x.strip()]
    except ValueError:
        p.error("--marker-delay-ms takes comma-separated integers")
    if not a.delays or min(a.delays) < 0 or a.partitions < 1 or (a.transactions is not None and a.transactions < 1):
        p.error("--partitions and --transactions must be at least 1, marker delays at least 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    n = a.transactions or (50 if a.quick else 300)
    started = time.monotonic()
    rows = bench(n, a.partitions, a.delays)
    print(f"draft round-trip KIP on the reference (1 node, TV1, {a.partitions} output partitions per transaction, "
          f"{n} transactions per row, modes interleaved in chunks of {CHUNK})")
    print(table(rows))
    print(f"wall time {time.monotonic() - started:.1f} s")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"benchmark": "kipcheck-txnrt", "rows": [r.summary() for r in rows],
                       "raw": [asdict(r) for r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
