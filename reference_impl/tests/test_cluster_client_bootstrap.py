"""ClusterClient's bootstrap: an address that accepts TCP and then closes (Docker's port
proxy in front of a container whose Kafka is still starting) is passed over for the next."""

from __future__ import annotations

import socket
import threading

import pytest

from reference_impl.client.raw_client import ClusterClient
from reference_impl.server.broker_server import ThreadedReferenceCluster


class AcceptAndClose(threading.Thread):
    """A listener that accepts every connection and closes it at once, as docker-proxy does
    when nothing listens in the container yet."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@pytest.fixture()
def half_open():
    listener = AcceptAndClose()
    listener.start()
    yield listener
    listener.sock.close()


def test_an_address_that_accepts_and_closes_is_passed_over(half_open):
    with ThreadedReferenceCluster(brokers=1) as cluster:
        with ClusterClient(f"127.0.0.1:{half_open.port},{cluster.bootstrap_servers}", timeout=5) as cc:
            assert half_open.accepted == 1  # it was tried first, and left
            assert cc.nodes and (cc.bootstrap.host, cc.bootstrap.port) != ("127.0.0.1", half_open.port)


def test_no_answering_address_names_every_one_tried(half_open):
    closed = socket.create_server(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(ConnectionError) as err:
        ClusterClient(f"127.0.0.1:{half_open.port},127.0.0.1:{refused_port}", timeout=5)
    assert f"127.0.0.1:{half_open.port} accepted but gave no Metadata" in str(err.value)
    assert f"cannot connect to 127.0.0.1:{refused_port}" in str(err.value)


def test_a_reconnect_passes_over_an_address_that_accepts_and_closes(half_open):
    """TransactionalProducer reconnects its bootstrap this way when FindCoordinator fails."""
    with ThreadedReferenceCluster(brokers=1) as cluster:
        with ClusterClient(cluster.bootstrap_servers, timeout=5) as cc:
            cc.reconnect(f"127.0.0.1:{half_open.port},{cluster.bootstrap_servers}")
            assert half_open.accepted == 1
            assert (cc.bootstrap.host, cc.bootstrap.port) != ("127.0.0.1", half_open.port)
            assert cc.refresh().brokers
