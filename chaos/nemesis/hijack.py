"""Client-side fault ``hijack``: a second producer initialises a workload's transactional
id mid-run (Kafka's ``transactions_test`` zombie; KIP-98 FENCE). The workload's own
producer becomes the zombie: the coordinator must fence it, and whatever it still gets
``ok`` after the hijack is judged by ``checkers.fencing``.

The hijacker is the reference transactional producer; its InitProducerId goes into the
history as a one-op incarnation (process ``hijack:<transactional id>:<n>``, an empty
``txn``), so the fencing rule sees where the fence stands. Effectiveness: the
InitProducerId succeeded and the (producer id, epoch) it got is newer than the one
DescribeTransactions showed just before (the epoch was bumped, or a new producer id).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from kio.schema.errors import ErrorCode

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.common import TargetInjector
from clients.wire import TXN_COORDINATOR_KEY_TYPE
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey
from reference_impl.protocol.framing import decode_tolerant_response
from reference_impl.client.raw_client import ClusterClient
from reference_impl.client.transactional_producer import TransactionalProducer
from reference_impl.protocol import framing, payloads

HIJACK_TIMEOUT_S = 30.0


def hijack_process(transactional_id: str, n: int) -> str:
    return f"hijack:{transactional_id}:{n}"


def hijackers_of(history: Any, transactional_id: str) -> list[str]:
    """Hijack processes of ``transactional_id`` in a history (for the fencing check)."""
    prefix = f"hijack:{transactional_id}:"
    return list(dict.fromkeys(op.process for op in history if str(op.process).startswith(prefix)))


class HijackNemesis(TargetInjector):
    kinds = ("hijack",)

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.workload: Any = None
        self.recorder: Any = None
        self._n = itertools.count(1)

    def bind(self, workload: Any, recorder: Any) -> None:
        """The runner hands over the workload (whose ids to hijack) and the history."""
        self.workload, self.recorder = workload, recorder

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        tids = list(getattr(self.workload, "transactional_ids", lambda: [])())
        tid = spec.param("transactional_id") or (self.rng.choice(tids) if tids else None)
        if tid is None:
            raise NotSupportedByTarget("hijack needs a workload with transactional ids (the copier)")
        bootstrap = self.admin_bootstrap()
        before = _wait_initialised(bootstrap, tid)
        record = self.start_record(spec, ())
        process = hijack_process(tid, next(self._n))
        producer = TransactionalProducer(bootstrap, tid, request_timeout_ms=10_000, max_block_ms=int(HIJACK_TIMEOUT_S * 1000))
        try:
            producer.init_transactions()
            after = producer.producer_id_and_epoch
            # recorded once init returned: the fence stands from this op on
            self.recorder.complete(self.recorder.invoke(process, "txn", []), "ok", [])
        except Exception as exc:  # noqa: BLE001 - the hijack did not happen: not effective
            self.recorder.complete(self.recorder.invoke(process, "txn", []), "info", error=repr(exc))
            record.effective, record.evidence = False, f"InitProducerId failed: {exc!r}"
            record.details.update({"transactional_id": tid, "before": before})
            return record
        finally:
            producer.close()
        record.details.update({"transactional_id": tid, "process": process, "before": before, "after": list(after)})
        record.effective = before is not None and (after[0] != before[0] or after[1] > before[1])
        record.evidence = (f"InitProducerId for {tid} got producer {after[0]} epoch {after[1]}"
                           f" (before: {'none' if before is None else f'producer {before[0]} epoch {before[1]}'})")
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        """Nothing to undo: the zombie stays fenced; the workload's next incarnation
        fences the hijacker in turn."""
        return self.close_record(record)


def _wait_initialised(bootstrap: str, tid: str, wait_s: float = 20.0) -> tuple[int, int] | None:
    """The id's (producer id, epoch) once the workload has initialised it (None: it never
    did within ``wait_s``: then there is no zombie and the hijack cannot be effective)."""
    deadline = time.monotonic() + wait_s
    while True:
        before = describe_producer(bootstrap, tid)
        if before is not None or time.monotonic() >= deadline:
            return before
        time.sleep(0.5)


def describe_producer(bootstrap: str, transactional_id: str, timeout_s: float = 10.0) -> tuple[int, int] | None:
    """(producer id, epoch) DescribeTransactions v0 shows for the id (None: unknown id).

    The response is read with the generated tolerant class (schemas.tolerant_response):
    kio refuses the -1 TransactionStartTimeMs Kafka sends when no transaction started."""
    deadline = time.monotonic() + timeout_s
    with ClusterClient(bootstrap, timeout=timeout_s) as cc:
        while True:
            node = cc.coordinator_for(transactional_id, TXN_COORDINATOR_KEY_TYPE, wait_s=timeout_s)
            if node.negotiate(ApiKey.DESCRIBE_TRANSACTIONS) is None:
                raise NotSupportedByTarget("DescribeTransactions is not supported (hijack effectiveness)")
            payload = payloads.build(framing.request_schema(ApiKey.DESCRIBE_TRANSACTIONS, 0),
                                     transactional_ids=(transactional_id,))
            error, pid, epoch = _first_state(node.send_frame(framing.encode_request(payload, 1, node.client_id)))
            if error == ErrorCode.transactional_id_not_found:
                return None
            if error == ErrorCode.none:
                return pid, epoch
            if time.monotonic() >= deadline:
                raise LookupError(f"DescribeTransactions({transactional_id}): {ErrorCode(error).name}")
            time.sleep(0.2)


def _first_state(frame: bytes) -> tuple[int, int, int]:
    """(error code, producer id, epoch) of the first TransactionState of a v0 response,
    decoded with the generated tolerant schema (kio refuses Kafka's start time -1)."""
    _, body = decode_tolerant_response(frame, ApiKey.DESCRIBE_TRANSACTIONS, 0)
    state = body.transaction_states[0]
    return int(state.error_code), int(state.producer_id), int(state.producer_epoch)
