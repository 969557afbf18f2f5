"""Bound vs advertised addresses: what a per-broker fault proxy needs from each target."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from targets.kafka_native import config as cfg
from targets.kafka_native.versions import resolve_release
from targets.factory import create_target
from reference_impl.client.raw_client import ClusterClient, RawClient


def _layouts(advertised: tuple[int, ...] = ()):
    return cfg.layout_nodes(Path("/tmp/run"), list(range(20000, 20009)), 3, advertised)


def test_kafka_native_advertises_proxy_and_replicates_on_internal():
    release = resolve_release("4.4")
    layouts = _layouts((30001, 30002, 30003))
    props = cfg.server_properties(release, layouts, layouts[1])
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert "PLAINTEXT://127.0.0.1:30002" in props["advertised.listeners"]
    assert f"INTERNAL://127.0.0.1:{layouts[1].internal_port}" in props["listeners"]
    assert f"PLAINTEXT://127.0.0.1:{layouts[1].client_port}" in props["listeners"]
    assert "INTERNAL:PLAINTEXT" in props["listener.security.protocol.map"]
    assert len({lay.internal_port for lay in layouts} | {lay.client_port for lay in layouts}) == 6


def test_kafka_native_default_layout_is_unchanged():
    release = resolve_release("4.4")
    layouts = _layouts()
    props = cfg.server_properties(release, layouts, layouts[0])
    assert props["inter.broker.listener.name"] == "PLAINTEXT" and "INTERNAL" not in props["listeners"]


def test_kafka_native_option_validates_ports():
    assert cfg.parse_options({"advertised_ports": "1,2,3"}).advertised_ports == (1, 2, 3)
    with pytest.raises(ValueError, match="advertised_ports"):
        cfg.parse_options({"advertised_ports": "1,x"})
    with pytest.raises(ValueError, match="lists 2 ports for 3 nodes"):
        _layouts((1, 2))


def test_reference_keeps_advertised_port_across_restart():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        fake_proxy_port = s.getsockname()[1]
    target = create_target("reference:nodes=3")
    target.advertise_client_ports({2: fake_proxy_port})
    target.start()
    try:
        bound = target.node_bind_address(2)
        assert bound[1] != fake_proxy_port
        with ClusterClient(target.cluster.cluster.bound_servers, timeout=10) as cc:
            assert cc.nodes[2] == ("127.0.0.1", fake_proxy_port)
        target.kill_node(2)
        target.restart_node(2)
        assert target.node_bind_address(2) == bound
        with RawClient(*bound, timeout=10) as client:
            assert client.api_versions(0)
        with ClusterClient(target.cluster.cluster.bound_servers, timeout=10) as cc:
            assert cc.nodes[2] == ("127.0.0.1", fake_proxy_port)
    finally:
        target.stop()
