"""Container faults on the `testcontainers` target: kill, pause, restart, network partition.

Kill/pause/restart go through the Docker API (`docker kill`, the cgroup freezer, `docker
restart`). A partition cuts the links between two groups of brokers on the cluster's
Docker network with blackhole routes inside each container's network namespace (`nsenter
--net=/proc/PID/ns/net ip route add blackhole PEER/32`): the host, and so the clients
reaching the published ports through the bridge gateway, still reach every broker, which is
what Jepsen's `partition` nemesis does with iptables (not installed here; tc netem neither).

Every fault is checked to have bitten: a killed node's port refuses, a paused node does not
answer ApiVersions, a restarted node has a new start time and answers again, a partitioned
node cannot open a TCP connection to a peer across the cut (and could before).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from targets.target import NotSupportedByTarget, probe_capabilities
from reference_impl.client.raw_client import ClusterClient
from targets.testcontainers_target import INTERNAL_PORT, TestcontainersTarget

PROBE_TIMEOUT_S = 3.0
NSENTER_TIMEOUT_S = 30.0
_COORDINATOR_KEY_TYPES = {"group-coordinator": 0, "txn-coordinator": 1, "share-coordinator": 2}
"""FindCoordinator key types (KIP-98: 1 = transaction, KIP-932: 2 = share)."""

_TCP_PROBE = (
    "import socket,sys\n"
    "for target in sys.argv[2:]:\n"
    "    ip, port = target.rsplit(':', 1)\n"
    "    try:\n"
    "        socket.create_connection((ip, int(port)), timeout=float(sys.argv[1])).close()\n"
    "        print(target, 'open')\n"
    "    except OSError:\n"
    "        print(target, 'closed')\n"
)
"""Run on the host's python inside a container's network namespace: which peers answer TCP."""


def _now_ns() -> int:
    return time.time_ns()


class ContainerNemesis:
    """Nemesis for a started TestcontainersTarget (targets.testcontainers_target)."""

    kinds = ("kill", "pause", "restart", "partition")

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.target: Any = None
        self._open: list[FaultRecord] = []

    # -- protocol ---------------------------------------------------------------------

    def prepare(self, target: Any) -> None:
        """Nothing to put in place before start: containers are reached by name."""

    def setup(self, target: Any) -> None:
        if not isinstance(target, TestcontainersTarget):
            raise NotSupportedByTarget(f"container faults need the testcontainers target, not {target.kind}")
        self.target = target

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in self.kinds:
            raise NotSupportedByTarget(f"container nemesis has no {spec.kind!r} fault (kinds: {', '.join(self.kinds)})")
        nodes = self.resolve_nodes(spec)
        record = FaultRecord(spec, nodes=nodes, started_ns=_now_ns())
        try:
            getattr(self, f"_apply_{spec.kind}")(record)
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            raise
        self._open.append(record)
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        getattr(self, f"_heal_{record.spec.kind}")(record)
        record.healed_ns = _now_ns()
        if record in self._open:
            self._open.remove(record)
        return record

    def heal_all(self) -> None:
        for record in list(reversed(self._open)):
            self.heal(record)

    def teardown(self) -> None:
        self.heal_all()
        self.target = None

    # -- node resolution --------------------------------------------------------------

    def resolve_nodes(self, spec: FaultSpec) -> tuple[int, ...]:
        """Explicit `nodes` param, a role (FindCoordinator / Metadata), or a count of nodes."""
        ids = list(self.target.node_ids)
        explicit = spec.param("nodes")
        if explicit:
            return tuple(int(n) for n in explicit)
        if spec.target == "role":
            return (self._resolve_role(spec),)
        count = {"one": 1, "minority": (len(ids) - 1) // 2 or 1, "majority": len(ids) // 2 + 1, "all": len(ids)}
        if spec.target not in count:
            raise ValueError(f"unknown fault target {spec.target!r}")
        return tuple(ids[: count[spec.target]])

    def _resolve_role(self, spec: FaultSpec) -> int:
        with ClusterClient(self.target.bootstrap_servers, timeout=10.0) as cc:
            if spec.role in _COORDINATOR_KEY_TYPES:
                key = spec.param("key") or spec.param("transactional_id") or spec.param("group_id")
                if not key:
                    raise ValueError(f"{spec.name} needs a key param (transactional id / group id)")
                deadline = time.monotonic() + 30
                while True:
                    error, node = cc.find_coordinator(key, _COORDINATOR_KEY_TYPES[spec.role])
                    if error == 0 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                if error != 0:
                    raise RuntimeError(f"FindCoordinator({key!r}) for {spec.name} answered error {error}")
                return node
            if spec.role == "leader":
                md = cc.refresh([spec.param("topic")])
                for t in md.topics:
                    for p in t.partitions:
                        if p.partition_index == int(spec.param("partition", 0)) and p.leader_id >= 0:
                            return int(p.leader_id)
                raise RuntimeError(f"no leader for {spec.param('topic')}-{spec.param('partition', 0)}")
        raise NotSupportedByTarget(f"container nemesis cannot resolve role {spec.role!r}")

    # -- kill / pause / restart -------------------------------------------------------

    def _node_answers(self, node: int) -> bool:
        try:
            probe_capabilities(self.target.node_bootstrap(node), timeout=PROBE_TIMEOUT_S)
            return True
        except Exception:  # noqa: BLE001 - any failure means "does not answer"
            return False

    def _apply_kill(self, record: FaultRecord) -> None:
        for node in record.nodes:
            self.target.kill_node(node)
        states = {n: self.target.container(n).status for n in record.nodes}
        silent = {n: not self._node_answers(n) for n in record.nodes}
        record.effective = all(s == "exited" for s in states.values()) and all(silent.values())
        record.evidence = f"container states {states}; broker silent {silent}"

    def _heal_kill(self, record: FaultRecord) -> None:
        for node in record.nodes:
            self.target.restart_node(node)
        record.details["answers_after_heal"] = {n: self._node_answers(n) for n in record.nodes}

    def _apply_pause(self, record: FaultRecord) -> None:
        for node in record.nodes:
            self.target.pause_node(node)
        states = {n: self.target.container(n).status for n in record.nodes}
        silent = {n: not self._node_answers(n) for n in record.nodes}
        record.effective = all(s == "paused" for s in states.values()) and all(silent.values())
        record.evidence = f"container states {states}; ApiVersions unanswered {silent}"

    def _heal_pause(self, record: FaultRecord) -> None:
        for node in record.nodes:
            self.target.resume_node(node)
        record.details["answers_after_heal"] = {n: self._wait_answers(n, 60) for n in record.nodes}

    def _wait_answers(self, node: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._node_answers(node):
                return True
            time.sleep(0.25)
        return False

    def _apply_restart(self, record: FaultRecord) -> None:
        before = {n: self.target.container(n).attrs["State"]["StartedAt"] for n in record.nodes}
        for node in record.nodes:
            self.target.restart_node(node)
        after = {n: self.target.container(n).attrs["State"]["StartedAt"] for n in record.nodes}
        answers = {n: self._node_answers(n) for n in record.nodes}
        record.effective = all(before[n] != after[n] for n in record.nodes) and all(answers.values())
        record.evidence = f"StartedAt {before} -> {after}; answers {answers}"

    def _heal_restart(self, record: FaultRecord) -> None:
        """A restart heals itself."""

    # -- partition --------------------------------------------------------------------

    def _net(self, node: int) -> tuple[int, str]:
        """(pid of the container's init, its IP on the cluster network)."""
        c = self.target.container(node)
        network = self.target.network_name()
        return int(c.attrs["State"]["Pid"]), c.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]

    def _nsenter(self, pid: int, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", *argv], capture_output=True,
                                  text=True, timeout=NSENTER_TIMEOUT_S, check=False)
        except FileNotFoundError as exc:
            raise NotSupportedByTarget(f"partitions need nsenter and ip on the host: {exc}") from exc

    def _reachable(self, pid: int, ips: list[str], port: int) -> dict[str, bool]:
        """One nsenter per node: ip -> a TCP connection to ip:port opens from inside it."""
        if not ips:
            return {}
        out = self._nsenter(pid, [sys.executable, "-c", _TCP_PROBE, str(PROBE_TIMEOUT_S),
                                  *(f"{ip}:{port}" for ip in ips)])
        seen = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
        return {ip: seen.get(f"{ip}:{port}") == "open" for ip in ips}

    def _probe_links(self, nets: dict[int, tuple[int, str]], links: list[tuple[int, int]]) -> dict[str, bool]:
        result = {}
        for a in sorted({a for a, _ in links}):
            peers = [b for x, b in links if x == a]
            answers = self._reachable(nets[a][0], [nets[b][1] for b in peers], INTERNAL_PORT)
            result.update({f"{a}->{b}": answers[nets[b][1]] for b in peers})
        return result

    def _links(self, record: FaultRecord) -> list[tuple[int, int]]:
        """(node, peer) pairs across the cut: isolated nodes vs the rest, both directions."""
        side = set(record.nodes)
        rest = [n for n in self.target.node_ids if n not in side]
        if not rest:
            raise ValueError("a partition needs nodes on both sides of the cut")
        return [(a, b) for a in side for b in rest] + [(b, a) for a in side for b in rest]

    def _apply_partition(self, record: FaultRecord) -> None:
        nets = {n: self._net(n) for n in self.target.node_ids}
        links = self._links(record)
        before = self._probe_links(nets, links)
        for a, b in links:
            out = self._nsenter(nets[a][0], ["ip", "route", "replace", "blackhole", f"{nets[b][1]}/32"])
            if out.returncode != 0:
                raise RuntimeError(f"ip route blackhole in node {a}: {out.stderr.strip()}")
        record.details["routes"] = [[a, nets[b][1]] for a, b in links]
        record.details["links"] = [[a, b] for a, b in links]
        during = self._probe_links(nets, links)
        record.effective = all(before.values()) and not any(during.values())
        record.evidence = f"peer TCP reachable before {before}; during {during}"

    def _heal_partition(self, record: FaultRecord) -> None:
        nets = {n: self._net(n) for n in self.target.node_ids}
        for a, ip in record.details.get("routes", []):
            self._nsenter(nets[a][0], ["ip", "route", "del", "blackhole", f"{ip}/32"])
        links = [tuple(link) for link in record.details.get("links", [])]
        record.details["reachable_after_heal"] = self._probe_links(nets, links)


__all__ = ["ContainerNemesis"]
