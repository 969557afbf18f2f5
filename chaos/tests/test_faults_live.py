"""Proof on live targets: each fault injected once against a live confluent-kafka client
(reference:nodes=3 and kafka-native 4.4 with 3 nodes), shown effective by its check and
healed (the client delivers again after the heal).

Every client connection goes through one Toxiproxy proxy per broker (the brokers
advertise the proxies); the kafka-native cluster is started once for the module.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v3.request import ProduceRequest

from chaos.nemesis.base import FaultSpec
from chaos.nemesis.network import NetworkNemesis
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.request import END_TXN, RequestNemesis
from chaos.nemesis.request_faults import RequestFaultHook
from chaos.toxiproxy.network import ToxiproxyNetwork
from targets.target import NotSupportedByTarget
from targets.factory import create_target
from replay.proxy import ThreadedCaptureProxy

TARGETS = [
    "reference:nodes=3",
    # One 3-node Kafka cluster for the whole module (module-scoped fixture, one xdist worker).
    pytest.param("kafka-native:4.4:nodes=3", marks=[
        pytest.mark.xdist_group("kafka_native"),
        pytest.mark.skipif(os.environ.get("KIPCHECK_SKIP_KAFKA_NATIVE", "") == "1",
                           reason="KIPCHECK_SKIP_KAFKA_NATIVE=1"),
    ]),
]
DELIVER_S = 120.0
PRODUCE = int(ProduceRequest.__api_key__)


class Live:
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.target = create_target(spec)
        self.network = ToxiproxyNetwork(seed=11)
        self.topic = f"chaos-{uuid.uuid4().hex[:8]}"

    def start(self) -> "Live":
        self.network.prepare(self.target)
        self.target.start()
        self.network.attach()
        admin = AdminClient({**self.network.client_config(), "log_level": 3})
        futures = admin.create_topics([NewTopic(self.topic, 1, replication_factor=len(self.target.node_ids))],
                                      request_timeout=60)
        for f in futures.values():
            f.result(90)
        return self

    def stop(self) -> None:
        try:
            self.network.teardown()
        finally:
            self.target.stop()

    def leader(self, kind: str, **params: Any) -> FaultSpec:
        return FaultSpec(kind, target="role", role="leader",
                         params=(("topic", self.topic), ("partition", 0), *params.items()))


@pytest.fixture(scope="module", params=TARGETS)
def live(request):
    live = Live(request.param).start()
    yield live
    live.stop()


class LiveProducer:
    """A confluent-kafka producer that lives through the fault; ``deliver`` waits for one
    acknowledged message (acks=all, idempotent)."""

    def __init__(self, conf: dict[str, str], topic: str, **extra: Any) -> None:
        self.topic = topic
        # A transactional producer's messages cannot outlive transaction.timeout.ms (60 s).
        timeout_ms = 60_000 if "transactional.id" in extra else int(DELIVER_S * 1000)
        self.producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "log_level": 3,
                                  "message.timeout.ms": timeout_ms, **extra})

    def deliver(self, timeout_s: float = DELIVER_S) -> None:
        result: list[Any] = []
        self.producer.produce(self.topic, b"v", on_delivery=lambda err, msg: result.append(err))
        deadline = time.monotonic() + timeout_s
        while not result and time.monotonic() < deadline:
            self.producer.poll(0.2)
        assert result == [None], f"no delivery within {timeout_s:.0f}s: {result}"

    def close(self) -> None:
        self.producer.flush(30)


def _inject_heal(nemesis: Any, target: Any, spec: FaultSpec, producer: LiveProducer) -> Any:
    nemesis.setup(target)
    try:
        producer.deliver()
        record = nemesis.invoke(spec)
        try:
            assert record.effective is not False, record.evidence
        finally:
            healed = nemesis.heal(record)
        assert healed.error is None, healed.error
        producer.deliver()
        return healed
    finally:
        nemesis.teardown()
        producer.close()


@pytest.mark.parametrize("kind", ["kill", "pause", "isolate", *(pytest.param(k, marks=pytest.mark.nightly) for k in ("stop", "bounce", "restart"))])
def test_process_fault_bites_and_heals(live, kind):
    producer = LiveProducer(live.network.client_config(), live.topic)
    record = _inject_heal(ProcessNemesis(seed=1), live.target, live.leader(kind), producer)
    assert record.effective is True and record.nodes, record.evidence


NETWORK = {
    "partition": {}, "blackhole": {}, "reset": {}, "limit-data": {"bytes": 16},
    "latency": {"ms": 400, "jitter_ms": 50}, "bandwidth": {"kb_per_s": 1}, "slicer": {"delay_us": 10_000},
}


@pytest.mark.parametrize("kind", list(NETWORK))
def test_network_fault_bites_and_heals(live, kind):
    producer = LiveProducer(live.network.client_config(), live.topic)
    record = _inject_heal(NetworkNemesis(live.network, seed=1), live.target, live.leader(kind, **NETWORK[kind]), producer)
    assert record.effective is True, record.evidence
    assert record.details["toxiproxy_seed"] == 11


def test_roles_resolve_to_live_nodes(live):
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = LiveProducer(live.network.client_config(), live.topic, **{"transactional.id": tid})
    producer.producer.init_transactions(60)
    nemesis = ProcessNemesis()
    nemesis.setup(live.target)
    roles = {
        "txn-coordinator": (("transactional_id", tid),),
        "group-coordinator": (("group", "chaos-group"),),
        "share-coordinator": (("group", "chaos-share"), ("topic", live.topic), ("partition", 0)),
        "leader": (("topic", live.topic), ("partition", 0)),
        "controller": (),
    }
    for role, params in roles.items():
        nodes = nemesis.nodes_for(FaultSpec("kill", target="role", role=role, params=params))
        assert len(nodes) == 1 and nodes[0] in live.target.node_ids, (role, nodes)


@pytest.fixture(params=["broker", "capture-proxy"])
def l7(live, request):
    """(client config, request nemesis): the broker's own hook (the reference broker has
    one), or the capture proxy (dialling the brokers' Toxiproxy proxies) with the hook,
    which works for any target."""
    if request.param == "broker":
        try:
            live.target.install_request_hook(None)  # no faults yet; raises where the broker has no hook
        except NotSupportedByTarget:
            pytest.skip(f"{live.target.kind} has no broker-side request seam (the capture proxy carries its faults)")
        yield live.network.client_config(), RequestNemesis()
        return
    hook = RequestFaultHook()
    capture = ThreadedCaptureProxy(live.network.bootstrap_servers).start()
    capture.proxy.request_hook = hook
    capture.proxy.node_ids = {"%s:%d" % live.network.proxy_address(n): n for n in live.target.node_ids}
    try:
        yield {"bootstrap.servers": capture.bootstrap_servers}, RequestNemesis(hook=hook)
    finally:
        capture.stop()


def test_hold_endtxn_delays_commit(live, l7):
    conf, nemesis = l7
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = LiveProducer(conf, live.topic, **{"transactional.id": tid})
    producer.producer.init_transactions(60)
    nemesis.setup(live.target)
    try:
        record = nemesis.invoke(FaultSpec("hold-endtxn", params=(("ms", 1500), ("transactional_id", tid))))
        producer.producer.begin_transaction()
        producer.producer.produce(live.topic, b"t")
        t0 = time.monotonic()
        producer.producer.commit_transaction(60)
        took = time.monotonic() - t0
        record = nemesis.heal(record)
    finally:
        nemesis.teardown()
    assert record.effective is True and record.details["matched"] == 1, record.evidence
    assert took >= 1.4, f"commit took {took:.2f}s under a 1.5 s EndTxn hold"


@pytest.mark.parametrize("kind,params", [
    ("delay", (("api_key", PRODUCE), ("ms", 500))),
    ("drop", (("api_key", PRODUCE),)),
    ("error", (("api_key", END_TXN), ("error", "coordinator_load_in_progress"))),
])
def test_request_fault_matches_and_client_recovers(live, l7, kind, params):
    conf, nemesis = l7
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = LiveProducer(conf, live.topic, **{"transactional.id": tid})
    producer.producer.init_transactions(60)
    nemesis.setup(live.target)
    try:
        record = nemesis.invoke(FaultSpec(kind, params=params))
        producer.producer.begin_transaction()
        producer.producer.produce(live.topic, b"t")
        try:
            producer.producer.commit_transaction(90)
        except KafkaException as exc:
            pytest.fail(f"the client did not recover from one {kind} request: {exc}")
        record = nemesis.heal(record)
    finally:
        nemesis.teardown()
    assert record.effective is True, record.evidence


def test_librdkafka_mock_has_no_proxy_seam():
    target = create_target("librdkafka-mock:nodes=3")
    with pytest.raises(NotSupportedByTarget):
        ToxiproxyNetwork().prepare(target)


@pytest.fixture(scope="module")
def mock_target():
    target = create_target("librdkafka-mock:nodes=3")
    target.start()
    yield target
    target.stop()


@pytest.mark.parametrize("kind", ["kill", "bounce", "restart", "stop", "pause"])
def test_process_fault_on_librdkafka_mock(mock_target, kind):
    """The mock can set a broker down and up (kill, bounce, restart), not stop or pause it."""
    topic = f"chaos-{uuid.uuid4().hex[:8]}"
    mock_target.provision_topic(topic, 1)  # the mock has no controller for CreateTopics
    producer = LiveProducer({"bootstrap.servers": mock_target.bootstrap_servers}, topic)
    spec = FaultSpec(kind, target="role", role="leader", params=(("topic", topic), ("partition", 0)))
    record = _inject_heal(ProcessNemesis(seed=1), mock_target, spec, producer)
    assert record.effective is True, record.evidence


def test_partition_cuts_the_live_client_off(live):
    """The proxies are what the client really uses (no bypass through advertised bound
    ports): with the leader's proxy cut, nothing is acknowledged; after the heal, it is."""
    producer = LiveProducer(live.network.client_config(), live.topic)
    nemesis = NetworkNemesis(live.network, seed=2)
    nemesis.setup(live.target)
    try:
        producer.deliver()
        record = nemesis.invoke(live.leader("partition"))
        acked: list[Any] = []
        producer.producer.produce(live.topic, b"cut", on_delivery=lambda err, msg: acked.append(err))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            producer.producer.poll(0.2)
        nemesis.heal(record)
        assert acked == [], "a message was acknowledged while the leader's proxy was cut"
        deadline = time.monotonic() + DELIVER_S
        while not acked and time.monotonic() < deadline:
            producer.producer.poll(0.2)
        assert acked == [None], f"the message produced during the cut was not delivered after heal: {acked}"
    finally:
        nemesis.teardown()
        producer.close()


def test_network_fault_through_a_bypassed_proxy_is_not_effective():
    """The advertised-listener trap: brokers that advertise their bound ports make every
    proxy fault a no-op for clients; the nemesis must say so."""
    live = Live("reference:nodes=3")
    live.network.prepare(live.target)
    live.target.advertise_client_ports({})  # undo: the brokers advertise their bound ports
    live.target.start()
    try:
        live.network.attach()
        nemesis = NetworkNemesis(live.network)
        nemesis.setup(live.target)
        record = nemesis.invoke(FaultSpec("partition", params=(("node", 1),)))
        nemesis.heal(record)
        assert record.effective is False and "clients bypass the fault" in record.evidence, record.evidence
    finally:
        live.stop()
