"""Exactly-once copier: consume-transform-produce from topic A to topic B in transactions.

    python -m conformance.eos_copier --bootstrap HOST:PORT --input A --output B \\
        --group G --transactional-id T --history copier.jsonl --process copier-3 \\
        [--client confluent|reference] [--transaction-version auto|1|2] [--max-batch 10] \\
        [--txn-pause-ms 20] [--idle-exit-s 1.5] [--group-protocol classic|consumer] [--config KEY=VALUE ...]

Each incarnation starts from its group's committed offsets (read with a stable OffsetFetch,
so offsets pending in a transaction of a killed predecessor are never used), then loops:
poll a batch of A, begin a transaction, send each record to the same partition of B, add
the consumed positions to the transaction (`send_offsets_to_transaction`), commit. A record
copied to B carries the input value plus `|<process>#<txn>` so that every send attempt is a
distinct value (the history checker names a value's writer by it); the input value is the
part before `|`.

Clients: `confluent` = confluent-kafka (librdkafka) transactional producer and an
assign()-based read_committed consumer (transaction protocol v1), or with `--group-protocol`
a subscribed member of a classic or KIP-848 group whose offsets are fenced by its generation
or member epoch (each assignment is a ``subscribe`` op); `reference` = the reference
`TransactionalProducer` (TV1 or TV2, `--transaction-version`) and the reference
assign-based consumer with a raw stable OffsetFetch.

History (JSON lines appended to `--history`, one op per line, indices assigned by whoever
assembles the file; format of checkers/history.py):

* ``assign`` (invoke + ok) when the consumer is positioned;
* per transaction ``txn`` invoke ``[["poll"], ["send", "B-p", value], ...]`` written before
  ``begin_transaction``; ``ok`` after a successful commit with the polled records of A and
  the acknowledged offsets in B; ``fail`` after a successful abort; a process killed in
  between leaves the invocation open (the harness completes it as ``info``).

Exit status: 0 once every input partition is copied up to its end offset and no record
arrived for `--idle-exit-s`; 3 after an aborted transaction or any client error (restart
it with the same transactional id).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from reference_impl.client.consumer import Consumer as ReferenceConsumer
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.security import ClientSecurity
from reference_impl.client.transactional_producer import GroupMetadata, TransactionalProducer, TxnError

from conformance.suites.kip447 import offset_fetch

OK_EXIT, RESTART_EXIT = 0, 3


class HistoryWriter:
    def __init__(self, path: str, process: str) -> None:
        self.process = process
        self._f = open(path, "a", encoding="utf-8")

    def op(self, type_: str, f: str, value: Any = None, error: Any = None) -> None:
        d = {"time_ns": time.time_ns(), "process": self.process, "type": type_, "f": f, "value": value}
        if error is not None:
            d["error"] = error
        self._f.write(json.dumps(d) + "\n")
        self._f.flush()  # SIGKILL loses nothing already written

    def close(self) -> None:
        self._f.close()


def _key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _invocation(output: str, items: list[tuple[int, str]]) -> list:
    return [["poll"]] + [["send", _key(output, p), v] for p, v in items]


def _completion(input_: str, output: str, reads: list[tuple[int, int, str]], sends: list[tuple[int, int | None, str]]) -> list:
    polled: dict[str, list] = {}
    for p, off, v in reads:
        polled.setdefault(_key(input_, p), []).append([off, v])
    mops: list = [["poll", polled]]
    for p, off, v in sends:
        mops.append(["send", _key(output, p), v if off is None else [off, v]])
    return mops


# --------------------------------------------------------------------------- confluent-kafka


def run_confluent(args: argparse.Namespace, hist: HistoryWriter, extra: dict[str, str]) -> int:
    base = {"bootstrap.servers": args.bootstrap, **extra}
    producer = Producer({**base, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 5})
    # init_transactions first: it fences and aborts a killed predecessor's open transaction,
    # so that the committed offsets read next are stable.
    producer.init_transactions(60)
    membership = {"group.protocol": args.group_protocol} if args.group_protocol else {}
    consumer = Consumer({**base, "group.id": args.group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.partition.eof": False, **membership})
    md = consumer.list_topics(args.input, timeout=30)
    partitions = sorted(md.topics[args.input].partitions)
    keys = [_key(args.input, p) for p in partitions]
    if args.group_protocol:
        # A group member: each (incremental) assignment starts from the committed offsets,
        # and its offsets carry the generation / member epoch (KIP-447, KIP-848).
        consumer.subscribe([args.input], on_assign=lambda c, tps: (hist.op("invoke", "subscribe", keys),
                                                                   hist.op("ok", "subscribe", keys)))
    else:
        # Offsets INVALID: librdkafka fetches the committed offsets (RequireStable at read_committed).
        consumer.assign([TopicPartition(args.input, p) for p in partitions])
        hist.op("invoke", "assign", keys)
        hist.op("ok", "assign", keys)
    txn_no, idle_since = 0, time.monotonic()
    try:
        while True:
            msgs = [m for m in consumer.consume(num_messages=args.max_batch, timeout=0.3) if m is not None]
            errors = [m for m in msgs if m.error()]
            if errors:
                raise KafkaException(errors[0].error())
            if not msgs:
                if time.monotonic() - idle_since >= args.idle_exit_s and _confluent_caught_up(consumer, args.input, partitions):
                    return OK_EXIT
                continue
            idle_since = time.monotonic()
            txn_no += 1
            tag = f"|{hist.process}#{txn_no}"
            items = [(m.partition(), m.value().decode() + tag) for m in msgs]
            hist.op("invoke", "txn", _invocation(args.output, items))
            acked: dict[int, int | None] = {}

            def on_delivery(i: int):
                def cb(err, msg):
                    acked[i] = None if err else msg.offset()
                return cb

            try:
                producer.begin_transaction()
                for i, (m, (p, v)) in enumerate(zip(msgs, items)):
                    producer.produce(args.output, value=v.encode(), key=m.key(), partition=p, on_delivery=on_delivery(i))
                time.sleep(args.txn_pause_ms / 1000)
                positions: dict[int, int] = {}
                for m in msgs:
                    positions[m.partition()] = m.offset() + 1
                producer.send_offsets_to_transaction(
                    [TopicPartition(args.input, p, o) for p, o in sorted(positions.items())],
                    consumer.consumer_group_metadata(), 30)
                time.sleep(args.txn_pause_ms / 1000)
                producer.commit_transaction(30)
                producer.poll(0)
            except KafkaException as exc:
                err = exc.args[0]
                outcome = "info"
                if err.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        outcome = "fail"
                    except KafkaException:
                        pass
                hist.op(outcome, "txn", _invocation(args.output, items), error=str(err))
                return RESTART_EXIT
            reads = [(m.partition(), m.offset(), m.value().decode()) for m in msgs]
            sends = [(p, acked.get(i), v) for i, (p, v) in enumerate(items)]
            hist.op("ok", "txn", _completion(args.input, args.output, reads, sends))
    finally:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001
            pass


def _confluent_caught_up(consumer, topic: str, partitions: list[int]) -> bool:
    positions = consumer.position([TopicPartition(topic, p) for p in partitions])
    unknown = [TopicPartition(topic, tp.partition) for tp in positions if tp.offset < 0]
    if unknown:
        # Nothing consumed from these in this incarnation: its start is the committed offset.
        committed = {tp.partition: tp.offset for tp in consumer.committed(unknown, timeout=10)}
        positions = [TopicPartition(topic, tp.partition, committed.get(tp.partition, tp.offset))
                     if tp.offset < 0 else tp for tp in positions]
    for tp in positions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
        if high > 0 and tp.offset < high:
            if os.environ.get("EOS_COPIER_DEBUG"):
                print(f"not caught up: {tp.partition} at {tp.offset} < {high}", file=sys.stderr)
            return False
    return True


# --------------------------------------------------------------------------- reference client


def _stable_committed(bootstrap: str, group: str, topic: str, partitions: list[int], timeout_s: float = 60.0,
                      security: Any = None) -> dict[int, int]:
    """Committed offsets via OffsetFetch with RequireStable, retrying UNSTABLE_OFFSET_COMMIT."""
    deadline = time.monotonic() + timeout_s
    with ClusterClient(bootstrap, security=security) as cc:
        while True:
            coord = cc.coordinator_for(group, wait_s=30)
            _, ans = offset_fetch(coord, group, topic, partitions, require_stable=True, lowest=7)
            if all(e == 0 for _, e in ans.values()):
                return {p: o for p, (o, _) in ans.items()}
            bad = {p: e for p, (_, e) in ans.items() if e not in (0, 88, 14, 15, 16)}
            if bad or time.monotonic() > deadline:
                raise RuntimeError(f"OffsetFetch(require_stable) answered {ans}")
            time.sleep(0.05)


def run_reference(args: argparse.Namespace, hist: HistoryWriter, extra: dict[str, str]) -> int:
    security = ClientSecurity.from_properties(extra)  # the same --config settings the confluent client gets

    tv: str | int = args.transaction_version if args.transaction_version == "auto" else int(args.transaction_version)
    producer = TransactionalProducer(args.bootstrap, args.transactional_id,
                                     transaction_timeout_ms=args.transaction_timeout_ms, transaction_version=tv,
                                     security=security)
    producer.init_transactions()
    with ClusterClient(args.bootstrap, security=security) as cc:
        md = cc.refresh([args.input])
        partitions = sorted(int(p.partition_index) for t in md.topics if t.name == args.input for p in t.partitions)
    committed = _stable_committed(args.bootstrap, args.group, args.input, partitions, security=security)
    consumer = ReferenceConsumer(args.bootstrap, "read_committed", max_wait_ms=100, max_partition_bytes=1, max_bytes=1,
                                 security=security)
    tps = [(args.input, p) for p in partitions]
    consumer.assign(tps)
    for tp in tps:
        if committed.get(tp[1], -1) >= 0:
            consumer.seek(tp, committed[tp[1]])
    hist.op("invoke", "assign", [_key(*tp) for tp in tps])
    hist.op("ok", "assign", [_key(*tp) for tp in tps])
    ends = {tp: consumer.end_offset(tp) for tp in tps}
    txn_no, idle_since = 0, time.monotonic()
    try:
        while True:
            polled = consumer.poll()
            recs = polled[: args.max_batch]
            # Keep the rest for the next transaction: rewind each partition to its first
            # record not taken.
            untaken: dict[int, int] = {}
            for r in polled[args.max_batch:]:
                untaken.setdefault(r.partition, r.offset)
            for p, o in untaken.items():
                consumer.seek((args.input, p), o)
            if not recs:
                if time.monotonic() - idle_since >= args.idle_exit_s and all(
                        consumer.position(tp) >= ends[tp] for tp in tps):
                    return OK_EXIT
                continue
            idle_since = time.monotonic()
            txn_no += 1
            tag = f"|{hist.process}#{txn_no}"
            items = [(r.partition, r.value.decode() + tag) for r in recs]
            hist.op("invoke", "txn", _invocation(args.output, items))
            try:
                producer.begin_transaction()
                for r, (p, v) in zip(recs, items):
                    producer.send(args.output, p, v, key=r.key)
                producer.flush()
                time.sleep(args.txn_pause_ms / 1000)
                positions: dict[tuple[str, int], int] = {}
                for r in recs:
                    positions[(args.input, r.partition)] = r.offset + 1
                producer.send_offsets_to_transaction(positions, GroupMetadata(args.group))
                time.sleep(args.txn_pause_ms / 1000)
                batches = list(producer.produced)
                producer.commit_transaction()
            except TxnError as exc:
                outcome = "info"
                try:
                    producer.abort_transaction()
                    outcome = "fail"
                except Exception:  # noqa: BLE001
                    pass
                hist.op(outcome, "txn", _invocation(args.output, items), error=repr(exc))
                return RESTART_EXIT
            offsets: dict[int, list[int]] = {}
            for b in batches:
                offsets.setdefault(b.partition, []).extend(range(b.base_offset, b.base_offset + b.record_count))
            sends = []
            for p, v in items:
                lst = offsets.get(p)
                sends.append((p, lst.pop(0) if lst else None, v))
            reads = [(r.partition, r.offset, r.value.decode()) for r in recs]
            hist.op("ok", "txn", _completion(args.input, args.output, reads, sends))
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance.eos_copier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--history", required=True, help="JSON-lines file the ops are appended to")
    ap.add_argument("--process", default=f"copier-{os.getpid()}", help="process name in the history")
    ap.add_argument("--client", choices=("confluent", "reference"), default="confluent")
    ap.add_argument("--transaction-version", choices=("auto", "1", "2"), default="auto",
                    help="reference client only")
    ap.add_argument("--transaction-timeout-ms", type=int, default=10000)
    ap.add_argument("--group-protocol", choices=("classic", "consumer"), default=None,
                    help="confluent only: subscribe as a member of a group of this protocol instead of assign()")
    ap.add_argument("--max-batch", type=int, default=10)
    ap.add_argument("--txn-pause-ms", type=int, default=20, help="pause inside each transaction (twice)")
    ap.add_argument("--idle-exit-s", type=float, default=1.5)
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka setting (confluent client)")
    args = ap.parse_args(argv)
    if args.group_protocol and args.client != "confluent":
        ap.error("--group-protocol needs --client confluent (the reference consumer only assigns)")
    extra = dict(kv.split("=", 1) for kv in args.config)
    hist = HistoryWriter(args.history, args.process)
    try:
        if args.client == "confluent":
            return run_confluent(args, hist, extra)
        return run_reference(args, hist, extra)
    except Exception as exc:  # noqa: BLE001 - any client error: the harness restarts us
        print(f"eos_copier: {exc!r}", file=sys.stderr)
        return RESTART_EXIT
    finally:
        hist.close()


if __name__ == "__main__":
    sys.exit(main())
