"""Per-request faults on a target without a broker-side seam: the request nemesis puts the
capture proxy in front of every broker and the clients bootstrap through it
(chaos/nemesis/request_proxy.py). Shown here on librdkafka's mock cluster (a real broker
implementation the project does not control, with no request hook); the same path runs
kafka-native in the chaos matrix (docs/chaos.md)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from chaos.nemesis.base import FaultSpec
from chaos.nemesis.request import RequestNemesis
from chaos.nemesis.request_proxy import ProxiedTarget
from targets.factory import create_target

TXN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def mock_target():
    target = create_target("librdkafka-mock:nodes=3")
    target.start()
    yield target
    target.stop()


@pytest.fixture
def proxied(mock_target):
    nemesis = RequestNemesis()
    nemesis.setup(mock_target)
    try:
        yield nemesis, nemesis.client_view(mock_target)
    finally:
        nemesis.teardown()


def test_every_broker_gets_a_proxy_listener_and_clients_see_only_the_proxy(mock_target, proxied):
    nemesis, view = proxied
    assert nemesis.carrier == "capture-proxy"
    assert isinstance(view, ProxiedTarget) and view.node_ids == mock_target.node_ids
    assert len(nemesis.proxy.listeners()) == len(mock_target.node_ids)
    proxy_ports = {int(hp.rpartition(":")[2]) for hp in nemesis.proxy.listeners().values()}
    with view.cluster_client(timeout=15.0) as cc:
        advertised = {int(p) for _, p in cc.nodes.values()}
    assert advertised == proxy_ports, "Metadata through the proxy must name only proxy listeners"


def test_hold_endtxn_through_the_capture_proxy_is_effective(proxied):
    nemesis, view = proxied
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = Producer({**view.client_config(), "transactional.id": tid, "transaction.timeout.ms": 60_000})
    producer.init_transactions(TXN_TIMEOUT_S)
    record = nemesis.invoke(FaultSpec("hold-endtxn", params=(("ms", 1500), ("transactional_id", tid))))
    producer.begin_transaction()
    producer.produce("chaos-request-proxy", b"t")
    t0 = time.monotonic()
    producer.commit_transaction(TXN_TIMEOUT_S)
    took = time.monotonic() - t0
    record = nemesis.heal(record)
    assert record.effective is True and record.details["matched"] == 1, record.evidence
    assert record.details["carrier"] == "capture-proxy"
    assert took >= 1.4, f"commit took {took:.2f}s under a 1.5 s EndTxn hold"


def test_a_fault_no_request_matched_is_not_effective(proxied):
    nemesis, _view = proxied
    record = nemesis.invoke(FaultSpec("hold-endtxn", params=(("ms", 100), ("transactional_id", "nobody"))))
    record = nemesis.heal(record)
    assert record.effective is False and record.details["matched"] == 0
