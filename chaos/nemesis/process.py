"""Process faults through the Target lifecycle: kill, stop, pause, bounce, restart.

kill is SIGKILL (restart at heal), stop a clean shutdown (restart at heal), pause
SIGSTOP/SIGCONT, bounce kill + immediate restart, restart a clean stop + start. The
effectiveness check is a raw ApiVersions to the node's own address: it must fail while
the node is down or paused; for bounce/restart a connection opened before the fault must
be cut by it. The reference broker keeps its in-memory state across a node kill (a
process-level restart is another issue), which the evidence says.
"""

from __future__ import annotations

from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.common import TargetInjector
from chaos.nemesis.probe import api_versions_ok, wait_answering
from fixtures.target import NotSupportedByTarget
from reference_impl.client.raw_client import RawClient

HEAL_TIMEOUT_S = 180.0
_REFERENCE_NOTE = "; reference broker: node state is in memory and survives the kill"


class ProcessNemesis(TargetInjector):
    kinds = ("kill", "stop", "pause", "bounce", "restart")

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in self.kinds:
            raise ValueError(f"process nemesis cannot inject {spec.kind!r}")
        nodes = self.nodes_for(spec)
        record = self.start_record(spec, nodes)
        try:
            evidence = [getattr(self, "_" + spec.kind)(n) for n in nodes]
        except NotSupportedByTarget:
            self.open.remove(record)
            raise
        record.effective = all(ok for ok, _ in evidence)
        record.evidence = "; ".join(e for _, e in evidence) + (_REFERENCE_NOTE if self.target.kind == "reference" else "")
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        for n in record.nodes:
            if record.spec.kind in ("kill", "stop"):
                self.target.restart_node(n)
            elif record.spec.kind == "pause":
                self.target.resume_node(n)
        back = [wait_answering(*self.address(n), HEAL_TIMEOUT_S) for n in record.nodes]
        if not all(back):
            record.error = f"nodes {[n for n, ok in zip(record.nodes, back) if not ok]} did not answer after heal"
        return self.close_record(record)

    # -- one node ------------------------------------------------------------------

    def _down_check(self, node_id: int, what: str) -> tuple[bool, str]:
        answered, detail = api_versions_ok(*self.address(node_id), timeout_s=2.0)
        return not answered, f"node {node_id} {what}: {detail}"

    def _kill(self, node_id: int) -> tuple[bool, str]:
        self.target.kill_node(node_id)
        return self._down_check(node_id, "killed")

    def _stop(self, node_id: int) -> tuple[bool, str]:
        stop = getattr(self.target, "stop_node", None)
        if stop is None:
            raise NotSupportedByTarget(f"{self.target.kind} cannot stop a node cleanly")
        stop(node_id)
        return self._down_check(node_id, "stopped")

    def _pause(self, node_id: int) -> tuple[bool, str]:
        self.target.pause_node(node_id)
        return self._down_check(node_id, "paused")

    def _bounce(self, node_id: int) -> tuple[bool, str]:
        with self._open_connection(node_id) as before:
            self.target.kill_node(node_id)
            ok, evidence = self._down_check(node_id, "killed")
            self.target.restart_node(node_id)
            cut = before.is_closed_by_peer(timeout=5.0)
        return ok and cut, f"{evidence}; restarted; connection from before the kill cut: {cut}"

    def _restart(self, node_id: int) -> tuple[bool, str]:
        with self._open_connection(node_id) as before:
            self.target.restart_node(node_id)
            cut = before.is_closed_by_peer(timeout=5.0)
        return cut, f"node {node_id} restarted; connection from before the restart cut: {cut}"

    def _open_connection(self, node_id: int) -> Any:
        host, port = self.address(node_id)
        client = RawClient(host, port, timeout=10.0)
        client.api_versions(0)
        return client
