"""Contract of the Toxiproxy adapter against the real, pinned toxiproxy-server.

Each toxic the nemeses use is applied to a proxy in front of a real echo server and its
effect on a real TCP round trip is measured (the adapter, the library and the server
together; nothing is mocked)."""

from __future__ import annotations

import socket
import time

import pytest

from chaos.tests.echo import EchoServer
from chaos.toxiproxy.client import ToxiproxyClient
from chaos.toxiproxy.install import VERSION
from chaos.toxiproxy.server import ToxiproxyServer



@pytest.fixture(scope="module")
def server():
    with ToxiproxyServer(seed=7) as srv:
        yield srv


@pytest.fixture()
def echo_proxy(server):
    client = ToxiproxyClient(server.host, server.port)
    with EchoServer() as echo:
        client.create("echo", echo.address)
        host, port = client.listen_address("echo")
        try:
            yield client, (host, port)
        finally:
            client.destroy_all()


def _round_trip(addr: tuple[str, int], payload: bytes = b"ping", timeout: float = 5.0) -> tuple[bytes, float]:
    t0 = time.monotonic()
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return got, time.monotonic() - t0


def test_server_reports_pinned_version_and_seed(server):
    assert ToxiproxyClient(server.host, server.port).version() == VERSION
    assert server.describe()["seed"] == 7


def test_clean_proxy_echoes(echo_proxy):
    client, addr = echo_proxy
    assert _round_trip(addr)[0] == b"ping"


def test_latency_and_update(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "latency", name="lat", latency=300)
    got, took = _round_trip(addr)
    assert got == b"ping" and took >= 0.3
    client.update_toxic("echo", "lat", latency=600)
    assert client.toxics("echo")["lat"]["latency"] == 600
    assert _round_trip(addr)[1] >= 0.6


def test_timeout_zero_blackholes(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "timeout", name="bh", timeout=0)
    with pytest.raises(socket.timeout):
        _round_trip(addr, timeout=1.0)
    client.remove_toxic("echo", "bh")
    assert _round_trip(addr)[0] == b"ping"


def test_reset_peer_resets(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "reset_peer", name="rst", stream="upstream", timeout=0)
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        got, _ = _round_trip(addr)
        if not got:  # the reset can surface as EOF on recv on some kernels
            raise ConnectionResetError("closed")


def test_bandwidth_limits_rate(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "bandwidth", name="bw", rate=50)  # KB/s
    got, took = _round_trip(addr, b"x" * 50_000, timeout=10.0)
    assert len(got) == 50_000 and took >= 0.8


def test_limit_data_closes_after_bytes(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "limit_data", name="lim", bytes=5)
    got, _ = _round_trip(addr, b"0123456789")
    assert got == b"01234"


def test_slicer_delivers_everything_in_pieces(echo_proxy):
    client, addr = echo_proxy
    client.add_toxic("echo", "slicer", name="sl", average_size=2, size_variation=1, delay=2000)
    got, _ = _round_trip(addr, b"abcdefghij" * 10)
    assert got == b"abcdefghij" * 10


def test_disable_refuses_and_enable_heals(echo_proxy):
    client, addr = echo_proxy
    client.disable("echo")
    with pytest.raises(OSError):
        _round_trip(addr, timeout=1.0)
    client.enable("echo")
    assert _round_trip(addr)[0] == b"ping"


def test_adapters_on_two_servers_do_not_share_state(server):
    with ToxiproxyServer(seed=8) as other:
        a, b = ToxiproxyClient(server.host, server.port), ToxiproxyClient(other.host, other.port)
        with EchoServer() as echo:
            a.create("only-a", echo.address)
            try:
                assert "only-a" in a.proxies() and "only-a" not in b.proxies()
            finally:
                a.destroy_all()
