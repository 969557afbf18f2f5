"""Per-request faults on any target: the capture proxy in front of every broker.

A target without a broker-side request seam (kafka-native, external, containers) gets
``replay.proxy.CaptureProxy`` with one listener per broker (its upstreams are the
addresses the brokers advertise, so behind a ToxiproxyNetwork they are the fault proxies)
and the request-fault hook on its public seam (``request_hook``, ``node_ids``). The proxy
rewrites every endpoint Metadata, FindCoordinator and Produce/Fetch hand out, so a client
that bootstraps through it never dials a broker directly; ``ProxiedTarget`` is the
target as the workload's clients see it (bootstrap = the proxy). The nemesis and the
other injectors keep using the real target (their probes must not go through faults).
"""

from __future__ import annotations

from typing import Any

from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import ClusterClient
from replay.proxy import ThreadedCaptureProxy

_PLAINTEXT = (None, "", "PLAINTEXT", "plaintext")


def advertised_nodes(target: Any, timeout_s: float = 15.0) -> dict[int, tuple[str, int]]:
    """node id -> the address the node advertises to clients (its Metadata endpoint)."""
    bootstrap = target.client_config().get("bootstrap.servers") or target.bootstrap_servers
    with ClusterClient(bootstrap, timeout=timeout_s) as cc:
        nodes = {int(n): (str(h), int(p)) for n, (h, p) in cc.nodes.items()}
    missing = sorted(set(target.node_ids) - set(nodes))
    if missing:
        raise RuntimeError(f"Metadata does not list node(s) {missing}; cannot put a proxy in front of them")
    return nodes


class RequestProxy:
    """A threaded capture proxy in front of every broker of ``target``, carrying ``hook``."""

    def __init__(self, target: Any, hook: Any) -> None:
        security = target.client_config().get("security.protocol")
        if security not in _PLAINTEXT:
            raise NotSupportedByTarget(
                f"{target.kind}: per-request faults need the capture proxy, which reads plaintext only "
                f"(client listener is {security})")
        self.target, self.hook = target, hook
        self.nodes = advertised_nodes(target)
        self._threaded: Any = None

    def start(self) -> "RequestProxy":
        upstream = ",".join(f"{h}:{p}" for _, (h, p) in sorted(self.nodes.items()))
        self._threaded = ThreadedCaptureProxy(upstream, "127.0.0.1:0", None).start()
        proxy = self._threaded.proxy
        proxy.node_ids = {f"{h}:{p}": n for n, (h, p) in self.nodes.items()}
        proxy.request_hook = self.hook
        return self

    @property
    def bootstrap_servers(self) -> str:
        return self._threaded.bootstrap_servers

    def listeners(self) -> dict[str, str]:
        """upstream host:port -> proxy host:port (evidence for the fault records)."""
        return self._threaded.proxy.mapping()

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()
            self._threaded = None


class ProxiedTarget:
    """``target`` as the workload's clients see it: every bootstrap is the capture proxy.
    Everything else (node ids, kind, version, lifecycle) is the real target's."""

    def __init__(self, target: Any, bootstrap: str) -> None:
        self._target = target
        self._bootstrap = bootstrap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def client_bootstrap(self) -> str:
        return self._bootstrap

    def client_config(self) -> dict[str, str]:
        return {**self._target.client_config(), "bootstrap.servers": self._bootstrap}

    def cluster_client(self, bootstrap: str | None = None, **kwargs: Any) -> Any:
        return self._target.cluster_client(bootstrap or self._bootstrap, **kwargs)

    def raw_client(self, host: str | None = None, port: int | None = None, **kwargs: Any) -> Any:
        if host is None:
            host, _, p = self._bootstrap.split(",")[0].rpartition(":")
            port = int(p)
        return self._target.raw_client(host, port, **kwargs)
