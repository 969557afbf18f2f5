"""One Toxiproxy proxy in front of each broker's client listener, advertised by the broker.

Kafka clients bootstrap once and then dial what Metadata, FindCoordinator and the
``node_endpoints`` of Produce/Fetch responses advertise, so a proxy in front of the
bootstrap alone is bypassed. Here every node advertises its own proxy's port, and
(kafka-native) the brokers talk to each other on a separate INTERNAL listener that no
proxy sits on. Order: ``prepare(target)`` before ``target.start()`` (proxies listen on
their ports, the target is told to advertise them), ``attach()`` after (each proxy's
upstream becomes its node's bound address).
"""

from __future__ import annotations

from typing import Any

from chaos.toxiproxy.client import ToxiproxyClient
from chaos.toxiproxy.server import HOST, ToxiproxyServer
from targets.target import NotSupportedByTarget

_UNATTACHED = "127.0.0.1:9"  # discard port: nothing listens until attach() sets the real upstream


def proxy_name(node_id: int) -> str:
    return f"node-{node_id}"


class ToxiproxyNetwork:
    def __init__(self, seed: int = 0, server: ToxiproxyServer | None = None) -> None:
        self._own_server = server is None
        self.server = server or ToxiproxyServer(seed=seed)
        self.client: ToxiproxyClient | None = None
        self.target: Any = None
        self.ports: dict[int, int] = {}

    def prepare(self, target: Any) -> "ToxiproxyNetwork":
        if not target.advertises_client_ports:
            raise NotSupportedByTarget(f"{target.kind} cannot advertise a proxy address per node")
        if self._own_server and self.server.proc is None:
            self.server.start()
        self.client = ToxiproxyClient(self.server.host, self.server.port)
        self.target = target
        for node_id in target.node_ids:
            self.client.create(proxy_name(node_id), _UNATTACHED, listen=f"{HOST}:0")
            self.ports[node_id] = self.client.listen_address(proxy_name(node_id))[1]
        target.advertise_client_ports(dict(self.ports))
        return self

    def attach(self) -> "ToxiproxyNetwork":
        assert self.client is not None, "prepare() first"
        for node_id in self.target.node_ids:
            host, port = self.target.node_bind_address(node_id)
            self.client.update_upstream(proxy_name(node_id), f"{host}:{port}")
        return self

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{self.ports[n]}" for n in sorted(self.ports))

    def client_config(self) -> dict[str, str]:
        """librdkafka settings whose every connection goes through the proxies."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def proxy_address(self, node_id: int) -> tuple[str, int]:
        return HOST, self.ports[node_id]

    def reset(self) -> None:
        if self.client is not None:
            self.client.reset()

    def teardown(self) -> None:
        try:
            if self.client is not None:
                self.client.destroy_all()
        finally:
            if self._own_server:
                self.server.stop()
