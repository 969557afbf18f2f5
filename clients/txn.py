"""Transaction requests on the raw client (KIP-98, KIP-447, KIP-890): the one copy of
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the
transactional Produce that the suites send.

Three layers, as Kafka's TransactionManager drives them:

- one round trip (`init_producer_id`, `add_partitions_to_txn`, `add_offsets_to_txn`,
  `txn_offset_commit`, `end_txn`, `produce_txn`): one request at the highest version both
  sides support in [lowest, highest], returned as (version, answer): the answer as decoded,
  flattened to {partition: error} where the request names partitions. The version comes
  back because the codes depend on it (KIP-588: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH below);
- settled (`settle`, `*_settled`): the same request again while the answer is retriable
  (clients.errors), until a deadline, as a client retries; the last answer;
- must succeed (`*_ok`): settled, then AssertionError unless the answer is NONE.

`TxnSession` keeps one transactional id's producer id, epoch and answers across those calls.
AddPartitionsToTxn is sent in its client form (<= v3): v4+ is the broker-to-broker batch (KIP-890).
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Callable, Collection, TypeVar

from kio.schema.errors import ErrorCode as E

from clients.errors import TXN_PRODUCE_RETRIABLE, TXN_SETTLING
from clients.wire import TXN_COORDINATOR_KEY_TYPE, Req, ms
from reference_impl.client.raw_client import ClusterClient, RawClient
from reference_impl.protocol.api_keys import ApiKey

T = TypeVar("T")
CLIENT_ADD_PARTITIONS_MAX = 3  # AddPartitionsToTxn v4+ batches transactions for brokers (KIP-890)


def coordinator(cc: ClusterClient, tid: str, wait_s: float = 30.0) -> RawClient:
    """The transaction coordinator of `tid` (FindCoordinator, key type 1)."""
    return cc.coordinator_for(tid, key_type=TXN_COORDINATOR_KEY_TYPE, wait_s=wait_s)


def settle(send: Callable[[], T], retriable: Callable[[T], bool], *, wait_s: float, every_s: float) -> T:
    """`send()` again, every `every_s`, while `retriable(answer)` holds and `wait_s` has not
    passed; the last answer."""
    deadline = time.monotonic() + wait_s
    while True:
        answer = send()
        if not retriable(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(every_s)


# ----------------------------------------------------------------------------- one round trip


def init_producer_id(node: RawClient, tid: str | None, *, timeout_ms: int = 60_000, producer_id: int = -1,
                     producer_epoch: int = -1, highest: int = 5, lowest: int = 0) -> tuple[int, Any]:
    """One InitProducerId (`tid` None: an idempotent producer): (version, response)."""
    r = Req(node, ApiKey.INIT_PRODUCER_ID, highest, lowest=lowest)
    return r.version, r.send(transactional_id=tid, transaction_timeout=ms(timeout_ms), producer_id=producer_id,
                             producer_epoch=producer_epoch)


def add_partitions_to_txn(node: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions: list[int], *,
                          highest: int = CLIENT_ADD_PARTITIONS_MAX) -> tuple[int, dict[int, int]]:
    """One AddPartitionsToTxn in the client form: (version, {partition: error})."""
    r = Req(node, ApiKey.ADD_PARTITIONS_TO_TXN, min(highest, CLIENT_ADD_PARTITIONS_MAX))
    topics = (r.part("AddPartitionsToTxnTopic", name=topic, partitions=tuple(partitions)),)
    resp = r.send(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                  v3_and_below_topics=topics)
    results = resp.results_by_topic_v3_and_below
    return r.version, {int(p.partition_index): int(p.partition_error_code) for t in results for p in t.results_by_partition}


def add_offsets_to_txn(node: RawClient, tid: str, pid: int, epoch: int, group: str, *,
                       highest: int = 4) -> tuple[int, Any]:
    """One AddOffsetsToTxn (the group's __consumer_offsets partition joins the transaction):
    (version, response)."""
    r = Req(node, ApiKey.ADD_OFFSETS_TO_TXN, highest)
    return r.version, r.send(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)


def txn_offset_commit(node: RawClient, tid: str, pid: int, epoch: int, group: str, topic: str,
                      offsets: dict[int, int], *, generation: int = -1, member_id: str = "",
                      instance_id: str | None = None, highest: int = 4, lowest: int = 3) -> tuple[int, dict[int, int]]:
    """One TxnOffsetCommit to the group coordinator `node`, with the consumer's generation,
    member id and instance id from v3 on (KIP-447 group fencing): (version, {partition: error})."""
    r = Req(node, ApiKey.TXN_OFFSET_COMMIT, highest, lowest=lowest)
    resp = r.send(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=generation,
        member_id=member_id, group_instance_id=instance_id,
        topics=(r.part(
            "TxnOffsetCommitRequestTopic", name=topic,
            partitions=tuple(
                r.part("TxnOffsetCommitRequestPartition", partition_index=p, committed_offset=o,
                       committed_leader_epoch=-1, committed_metadata="")
                for p, o in sorted(offsets.items())
            ),
        ),),
    )
    return r.version, {int(pr.partition_index): int(pr.error_code) for t in resp.topics for pr in t.partitions}


def end_txn(node: RawClient, tid: str, pid: int, epoch: int, committed: bool, *, highest: int = 4,
            lowest: int = 0) -> tuple[int, Any]:
    """One EndTxn: (version, response). From v5 (KIP-890, TV2) the answer carries the bumped epoch."""
    r = Req(node, ApiKey.END_TXN, highest, lowest=lowest)
    return r.version, r.send(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed)


def produce_txn(client: RawClient, tid: str, topic: str, partition: int, batch: bytes, *, highest: int = 11,
                lowest: int = 3) -> tuple[int, Any]:
    """One transactional Produce (v12+: the leader adds the partition itself, KIP-890):
    (version, partition response)."""
    r = Req(client, ApiKey.PRODUCE, highest, lowest=lowest)
    resp = r.send(
        transactional_id=tid, acks=-1, timeout=ms(30_000),
        topic_data=(r.part("TopicProduceData", name=topic,
                           partition_data=(r.part("PartitionProduceData", index=partition, records=batch),)),),
    )
    return r.version, resp.responses[0].partition_responses[0]


# ----------------------------------------------------------------------------- settled


def init_producer_id_settled(
    cc: ClusterClient, tid: str | None = None, *, timeout_ms: int = 60_000, retriable: Collection[int] = TXN_SETTLING,
    wait_s: float = 30.0, every_s: float = 0.2, on_answer: Callable[[Any], None] | None = None,
) -> tuple[RawClient, Any]:
    """InitProducerId to `tid`'s coordinator (any broker when `tid` is None), found again
    before each attempt, retried while the answer is in `retriable`: the first transactional
    id creates __transaction_state on Kafka. `on_answer` sees every response. Returns
    (node it went to, last response)."""
    deadline = time.monotonic() + wait_s

    def attempt() -> tuple[RawClient, Any]:
        node = cc.bootstrap if tid is None else coordinator(cc, tid, max(0.0, deadline - time.monotonic()))
        _, resp = init_producer_id(node, tid, timeout_ms=timeout_ms)
        if on_answer is not None:
            on_answer(resp)
        return node, resp

    return settle(attempt, lambda answer: int(answer[1].error_code) in retriable, wait_s=wait_s, every_s=every_s)


def add_partitions_settled(node: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions: list[int], *,
                           wait_s: float = 20.0) -> tuple[int, dict[int, int]]:
    """AddPartitionsToTxn retried every 100 ms while CONCURRENT_TRANSACTIONS (the previous
    transaction still writing its markers)."""
    return settle(lambda: add_partitions_to_txn(node, tid, pid, epoch, topic, partitions),
                  lambda answer: E.concurrent_transactions in answer[1].values(), wait_s=wait_s, every_s=0.1)


def end_txn_settled(node: RawClient, tid: str, pid: int, epoch: int, committed: bool, *, highest: int = 4,
                    wait_s: float = 20.0, every_s: float = 0.1) -> tuple[int, Any]:
    """EndTxn to `node` retried while CONCURRENT_TRANSACTIONS (an earlier transaction or
    EndTxn still completing), as a client retries it."""
    return settle(lambda: end_txn(node, tid, pid, epoch, committed, highest=highest),
                  lambda answer: int(answer[1].error_code) == E.concurrent_transactions, wait_s=wait_s, every_s=every_s)


def produce_txn_ok(client: RawClient, tid: str, topic: str, partition: int, batch: bytes, *, highest: int = 11,
                   lowest: int = 3, wait_s: float = 20.0) -> tuple[int, Any]:
    """produce_txn, the same batch again every 200 ms while the answer is retriable
    (clients.errors.TXN_PRODUCE_RETRIABLE); the last answer, whatever it is."""
    return settle(lambda: produce_txn(client, tid, topic, partition, batch, highest=highest, lowest=lowest),
                  lambda answer: int(answer[1].error_code) in TXN_PRODUCE_RETRIABLE, wait_s=wait_s, every_s=0.2)


# ----------------------------------------------------------------------------- must succeed


def init_ok(cc: ClusterClient, tid: str, *, timeout_ms: int = 60_000, wait_s: float = 30.0) -> tuple[RawClient, Any, list[int]]:
    """InitProducerId until it succeeds, retried every 100 ms; (coordinator, response, the
    error codes before success). CONCURRENT_TRANSACTIONS comes while an open transaction of
    the id is being aborted (fencing)."""
    codes: list[int] = []
    node, resp = init_producer_id_settled(cc, tid, timeout_ms=timeout_ms, wait_s=wait_s, every_s=0.1,
                                          on_answer=lambda r: codes.append(int(r.error_code)))
    if codes[-1] != E.none:
        raise AssertionError(f"InitProducerId({tid}) kept failing: {codes}")
    return node, resp, codes[:-1]


def add_partitions_ok(node: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions: list[int],
                      wait_s: float = 20.0) -> None:
    _, got = add_partitions_settled(node, tid, pid, epoch, topic, partitions, wait_s=wait_s)
    if set(got.values()) != {E.none}:
        raise AssertionError(f"AddPartitionsToTxn({tid}) failed: {got}")


def end_txn_ok(node: RawClient, tid: str, pid: int, epoch: int, committed: bool, highest: int = 4,
               wait_s: float = 20.0) -> Any:
    _, resp = end_txn_settled(node, tid, pid, epoch, committed, highest=highest, wait_s=wait_s)
    if int(resp.error_code) != E.none:
        raise AssertionError(f"EndTxn({tid}, committed={committed}) failed: {int(resp.error_code)}")
    return resp


# ----------------------------------------------------------------------------- session


@dataclass
class TxnSession:
    """One transactional id on the wire: its producer id and epoch, and every coordinator
    answer it got (`answers`: api, version, error_code). Each request finds the coordinator
    again (as a client does after NOT_COORDINATOR) and is resent every `every_s` while the
    answer is settling (clients.errors.TXN_SETTLING)."""

    cc: ClusterClient
    tid: str
    _: KW_ONLY
    pid: int = -1
    epoch: int = -1
    timeout_ms: int = 60_000
    every_s: float = 0.2
    answers: list[dict[str, Any]] = field(default_factory=list)

    def coordinator(self) -> RawClient:
        return coordinator(self.cc, self.tid)

    def init_producer_id(self, *, highest: int = 5, lowest: int = 0, wait_s: float = 30.0) -> Any:
        """InitProducerId; on NONE its producer id and epoch become the session's."""
        _, resp = self._settled("InitProducerId", lambda node: init_producer_id(
            node, self.tid, timeout_ms=self.timeout_ms, highest=highest, lowest=lowest), wait_s)
        if int(resp.error_code) == E.none:
            self.pid, self.epoch = int(resp.producer_id), int(resp.producer_epoch)
        return resp

    def add_offsets_to_txn(self, group: str, *, highest: int = 4, wait_s: float = 30.0) -> Any:
        return self._settled("AddOffsetsToTxn", lambda node: add_offsets_to_txn(
            node, self.tid, self.pid, self.epoch, group, highest=highest), wait_s)[1]

    def txn_offset_commit(self, group: str, topic: str, offsets: dict[int, int], *, generation: int = -1,
                          member_id: str = "", instance_id: str | None = None,
                          lowest: int = 3) -> tuple[int, dict[int, int]]:
        """One TxnOffsetCommit (v`lowest`..v4) to the group's coordinator, not retried: the
        scenario looks at every answer. (version, {partition: error})."""
        version, out = txn_offset_commit(
            self.cc.coordinator_for(group, wait_s=30), self.tid, self.pid, self.epoch, group, topic, offsets,
            generation=generation, member_id=member_id, instance_id=instance_id, lowest=lowest)
        self.answers += [{"api": "TxnOffsetCommit", "version": version, "error_code": code} for code in out.values()]
        return version, out

    def end_txn(self, committed: bool, *, highest: int = 4, lowest: int = 0, wait_s: float = 20.0) -> Any:
        """EndTxn; on NONE at v5+ the bumped epoch becomes the session's (KIP-890)."""
        version, resp = self._settled("EndTxn", lambda node: end_txn(
            node, self.tid, self.pid, self.epoch, committed, highest=highest, lowest=lowest), wait_s)
        if int(resp.error_code) == E.none and version >= 5:
            self.pid, self.epoch = int(resp.producer_id), int(resp.producer_epoch)
        return resp

    def describe(self) -> Any:
        """DescribeTransactions v0 of the id: its state as the coordinator reports it."""
        resp = self.coordinator().request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(self.tid,))
        return resp.transaction_states[0]

    def _settled(self, api: str, send: Callable[[RawClient], tuple[int, Any]], wait_s: float) -> tuple[int, Any]:
        def attempt() -> tuple[int, Any]:
            version, resp = send(self.coordinator())
            self.answers.append({"api": api, "version": version, "error_code": int(resp.error_code)})
            return version, resp

        return settle(attempt, lambda answer: int(answer[1].error_code) in TXN_SETTLING,
                      wait_s=wait_s, every_s=self.every_s)
