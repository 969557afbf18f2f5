"""Fixtures of the wire tests that moved up from reference_impl/tests (they use the clients
helpers): reference clusters and a client of each, copied from reference_impl/tests/conftest.py."""

from __future__ import annotations

import pytest

from reference_impl.client.raw_client import ClusterClient
from reference_impl.server.broker_server import ThreadedReferenceCluster


@pytest.fixture(scope="module", params=[1, 3], ids=["brokers=1", "brokers=3"])
def cluster(request):
    """A reference cluster with one node, then with three (leader and coordinator differ)."""
    with ThreadedReferenceCluster(brokers=request.param) as c:
        yield c


@pytest.fixture()
def client(cluster):
    with ClusterClient(cluster.bootstrap_servers) as cc:
        yield cc


@pytest.fixture(scope="module")
def cluster3():
    """A 3-node reference cluster, for checks that need a node that is not the
    partition leader or the group coordinator."""
    with ThreadedReferenceCluster(brokers=3) as c:
        yield c


@pytest.fixture()
def client3(cluster3):
    with ClusterClient(cluster3.bootstrap_servers) as cc:
        yield cc
