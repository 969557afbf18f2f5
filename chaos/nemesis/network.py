"""Network faults on the per-broker Toxiproxy proxies (chaos.toxiproxy.network).

partition: the node's client proxy disabled (``mode=timeout``: timeout-0 toxics both
ways, a silent cut); blackhole: timeout-0 toxics both ways; reset: reset_peer; latency:
latency + jitter; bandwidth: a KB/s cap; slicer: responses in small slices; limit-data:
the connection closes after N bytes. The check probes *through the proxy clients use*:
a cut must stop a fresh ApiVersions, a slowing toxic must slow it by what it promises,
and the node's Metadata must advertise the proxy (else clients bypass it).
Brokers keep talking on their INTERNAL listener, so only clients are cut.
"""

from __future__ import annotations

from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.common import TargetInjector
from chaos.nemesis.probe import api_versions_exchange, api_versions_ok
from chaos.toxiproxy.network import ToxiproxyNetwork, proxy_name
from reference_impl.client.raw_client import ClusterClient

_CUTS = ("partition", "blackhole", "reset", "limit-data")


class NetworkNemesis(TargetInjector):
    kinds = ("partition", "latency", "bandwidth", "reset", "blackhole", "slicer", "limit-data")

    def __init__(self, network: ToxiproxyNetwork | None = None, seed: int = 0) -> None:
        """``network``: proxies a caller already manages; None: this nemesis starts its own
        Toxiproxy server in ``prepare`` and removes it in ``teardown``."""
        super().__init__(seed)
        self._owns_network = network is None
        self.network = network if network is not None else ToxiproxyNetwork(seed=seed)

    @property
    def client(self):  # noqa: ANN201 - the adapter
        assert self.network.client is not None, "ToxiproxyNetwork.prepare() first"
        return self.network.client

    def prepare(self, target: Any) -> None:
        """One proxy per node, each advertised by its node (set before the target starts)."""
        self.network.prepare(target)

    def setup(self, target: Any) -> None:
        super().setup(target)
        if self.network.target is target and self.network.client is not None:
            self.network.attach()
        self._advertised: dict[int, tuple[str, int]] = {}

    def _bypassed(self, node_id: int) -> str | None:
        """Why clients would not go through this node's proxy (it advertises another
        address), or None. Checked against the cluster's own Metadata."""
        if not self._advertised:
            with ClusterClient(self.admin_bootstrap(), timeout=10.0) as cc:
                self._advertised = dict(cc.nodes)
        advertised, proxy = self._advertised.get(node_id), self.network.proxy_address(node_id)
        if advertised is None or (advertised[0], int(advertised[1])) != proxy:
            return f"node {node_id} advertises {advertised}, not its proxy {proxy}: clients bypass the fault"
        return None

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in self.kinds:
            raise ValueError(f"network nemesis cannot inject {spec.kind!r}")
        nodes = self.nodes_for(spec)
        record = self.start_record(spec, nodes)
        baseline = {n: _fastest_exchange(*self.network.proxy_address(n)) for n in nodes}
        for n in nodes:
            record.details.setdefault("toxics", {})[n] = self._apply(spec, proxy_name(n))
        checks = [self._check(spec, n, baseline[n]) for n in nodes]
        bypass = [why for why in map(self._bypassed, nodes) if why]
        if bypass:
            checks.append((False, "; ".join(bypass)))
        record.effective = all(ok for ok, _ in checks)
        record.evidence = "; ".join(e for _, e in checks)
        record.details["toxiproxy_seed"] = self.network.server.seed
        return record

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self._owns_network:
                self.network.teardown()

    def heal(self, record: FaultRecord) -> FaultRecord:
        for n in record.nodes:
            name = proxy_name(n)
            self.client.enable(name)
            for toxic in record.details.get("toxics", {}).get(n, []):
                self.client.remove_toxic(name, toxic)
        return self.close_record(record)

    def _apply(self, spec: FaultSpec, proxy: str) -> list[str]:
        kind, p = spec.kind, spec.param
        if kind == "partition" and p("mode", "disable") == "disable":
            self.client.disable(proxy)
            return []
        if kind in ("partition", "blackhole"):
            return [self.client.add_toxic(proxy, "timeout", stream=s, timeout=0) for s in ("upstream", "downstream")]
        if kind == "reset":
            return [self.client.add_toxic(proxy, "reset_peer", stream="upstream", timeout=0)]
        if kind == "latency":
            return [self.client.add_toxic(proxy, "latency", latency=int(p("ms", 500)), jitter=int(p("jitter_ms", 0)))]
        if kind == "bandwidth":
            return [self.client.add_toxic(proxy, "bandwidth", rate=int(p("kb_per_s", 1)))]
        if kind == "slicer":
            return [self.client.add_toxic(proxy, "slicer", average_size=int(p("average_size", 8)),
                                          size_variation=int(p("size_variation", 4)), delay=int(p("delay_us", 10_000)))]
        if kind == "limit-data":
            return [self.client.add_toxic(proxy, "limit_data", bytes=int(p("bytes", 16)))]
        raise ValueError(kind)

    def _check(self, spec: FaultSpec, node_id: int, baseline: tuple[float, int] | None) -> tuple[bool, str]:
        host, port = self.network.proxy_address(node_id)
        where = f"node {node_id} via proxy {host}:{port}"
        if spec.kind in _CUTS:
            answered, detail = api_versions_ok(host, port, timeout_s=2.0)
            return not answered, f"{where}: {detail}"
        got = api_versions_exchange(host, port, timeout_s=30.0)
        if got is None or baseline is None:
            return False, f"{where}: ApiVersions did not complete (baseline {baseline}, faulted {got})"
        seconds, size = got
        expected = self._promised_delay(spec, size)
        ok = seconds - baseline[0] >= 0.8 * expected if expected > 0 else False
        return ok, f"{where}: ApiVersions {baseline[0]:.3f}s -> {seconds:.3f}s ({size} bytes; toxic promises +{expected:.3f}s)"

    @staticmethod
    def _promised_delay(spec: FaultSpec, response_bytes: int) -> float:
        p = spec.param
        if spec.kind == "latency":
            return int(p("ms", 500)) / 1000.0
        if spec.kind == "bandwidth":
            return response_bytes / (int(p("kb_per_s", 1)) * 1000.0)
        if spec.kind == "slicer":
            slices = response_bytes / max(1, int(p("average_size", 8)) + int(p("size_variation", 4)))
            return slices * int(p("delay_us", 10_000)) / 1e6
        return 0.0


def _fastest_exchange(host: str, port: int, samples: int = 3) -> tuple[float, int] | None:
    """The fastest of a few ApiVersions round trips: one sample on a loaded machine can be
    slow enough to hide the delay a toxic adds (seen: 0.18 s baseline, +0.34 s for 0.5 s)."""
    got = [x for x in (api_versions_exchange(host, port) for _ in range(samples)) if x is not None]
    return min(got) if got else None
