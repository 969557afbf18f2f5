"""KAFKA-17754: a delayed EndTxn, sent before the client gave up on its transaction,
reaches the coordinator after the *next* transaction began and ends that one.

The client (the reference transactional producer, TV2 where the target finalised it,
else TV1) writes ``t1`` and sends EndTxn(commit); that request is held in the network
(the ``hold-endtxn`` fault's starting condition, measured in
docs/chaos.md: the client times out while the held request still arrives later). The
client gives up: it aborts transaction 1, begins transaction 2 and writes ``t2``. Then
the held EndTxn(commit) is released: its frame, built at commit time with transaction
1's producer id and epoch, is written to the coordinator on its own connection (the
request a proxy would forward late). Finally the client aborts transaction 2.

Correct outcomes: the late EndTxn is refused (TV2: KIP-890 bumped the epoch at the
abort, so it is fenced) or is a no-op, and a read_committed read sees neither value.
Wrong outcomes: ``t2`` visible (the late EndTxn committed the wrong transaction), or
``t1`` visible (it committed an aborted one), or the client's abort of transaction 2
failing because the late request already ended it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kio.schema.errors import ErrorCode

from reference_impl.protocol.api_keys import ApiKey
from clients import confluent
from clients.confluent import quiet_config as _config
from clients.wire import TXN_COORDINATOR_KEY_TYPE
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.protocol import framing, payloads
from targets.factory import create_target

READ_TIMEOUT_S = 20.0


@dataclass
class Outcome:
    target: str
    transaction_version: int | None
    end_txn_version: int | None = None
    txn1: list[int] = field(default_factory=list)
    """Producer id and epoch transaction 1 (and its held EndTxn) used."""
    txn2: list[int] = field(default_factory=list)
    late_end_txn_error: str | None = None
    abort2_error: str | None = None
    visible: list[str] = field(default_factory=list)
    verdict: str = ""
    explanation: str = ""

    @property
    def wrong(self) -> bool:
        return self.verdict.startswith("wrong")


def run(target: Any, target_spec: str, tag: str | None = None, transaction_version: str | int = "auto") -> Outcome:
    """The scenario on a started target; ``transaction_version`` 1 forces a TV1 client."""
    tag = tag or uuid.uuid4().hex[:8]
    topic, tid = f"kafka-17754-{tag}", f"kafka-17754-{tag}"
    confluent.create_topic(target, topic, partitions=1)
    p = TransactionalProducer(target.bootstrap_servers, tid, request_timeout_ms=15_000, max_block_ms=30_000,
                              transaction_version=transaction_version)
    cc = ClusterClient(target.bootstrap_servers, timeout=15)
    try:
        p.init_transactions()
        out = Outcome(target_spec, p.transaction_version)
        p.begin_transaction()
        p.send(topic, 0, "t1")
        p.flush()
        pid, epoch = p.producer_id_and_epoch
        out.txn1 = [pid, epoch]
        coord = cc.coordinator_for(tid, TXN_COORDINATOR_KEY_TYPE, wait_s=15)
        tv2 = (p.transaction_version or 0) >= 2
        version = coord.negotiate(ApiKey.END_TXN, None if tv2 else 4)
        out.end_txn_version = version
        held = payloads.build(framing.request_schema(ApiKey.END_TXN, version), transactional_id=tid,
                              producer_id=pid, producer_epoch=epoch, committed=True)
        # the client gave up on the held commit: it aborts and moves on
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, 0, "t2")
        p.flush()
        out.txn2 = list(p.producer_id_and_epoch)
        # the held EndTxn(commit) of transaction 1 arrives now
        late = cc.coordinator_for(tid, TXN_COORDINATOR_KEY_TYPE, wait_s=15).send(held)
        out.late_end_txn_error = ErrorCode(int(late.error_code)).name
        try:
            p.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - what the client saw is part of the outcome
            out.abort2_error = getattr(exc, "name", None) or repr(exc)
        out.visible = read_committed(target, topic)
    finally:
        p.close()
        cc.close()
    return judge(out)


def judge(out: Outcome) -> Outcome:
    if "t2" in out.visible:
        out.verdict = "wrong: committed the next transaction"
        out.explanation = ("the held EndTxn(commit) of transaction 1 committed transaction 2, "
                           "which the client then aborted")
    elif "t1" in out.visible:
        out.verdict = "wrong: committed an aborted transaction"
        out.explanation = "the held EndTxn(commit) committed transaction 1 after the client aborted it"
    elif out.abort2_error is not None:
        out.verdict = "wrong: ended the next transaction"
        out.explanation = (f"the held EndTxn ({out.late_end_txn_error}) ended transaction 2 under the client, "
                           f"whose abort then failed: {out.abort2_error}")
    elif out.late_end_txn_error == ErrorCode.none.name:
        out.verdict = "harmless"
        out.explanation = "the held EndTxn was answered NONE but neither value became visible"
    else:
        out.verdict = "fenced"
        out.explanation = f"the held EndTxn was refused ({out.late_end_txn_error}); nothing wrong became visible"
    return out


def read_committed(target: Any, topic: str, timeout_s: float = READ_TIMEOUT_S) -> list[str]:
    """Values a read_committed consumer sees in partition 0, up to the end of the log."""
    c = Consumer(_config(target, {"group.id": f"{topic}-reader", "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "enable.partition.eof": True}))
    seen: list[str] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:  # the stable end is reached
                    break
                continue
            seen.append((msg.value() or b"").decode())
    finally:
        c.close()
    return seen


def run_spec(target_spec: str, out_dir: Path, transaction_version: str | int = "auto") -> Outcome:
    """Start the target, run the scenario, write ``scenario.json``."""
    target = create_target(target_spec)
    target.start()
    try:
        out = run(target, target_spec, transaction_version=transaction_version)
    finally:
        target.stop()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.json").write_text(json.dumps({"scenario": "kafka-17754", **asdict(out)}, indent=1))
    return out
