"""Process faults through the Target lifecycle: kill, stop, pause, bounce, restart, isolate.

kill is SIGKILL (restart at heal), stop a clean shutdown (restart at heal), pause
SIGSTOP/SIGCONT, bounce kill + immediate restart, restart a clean stop + start. The
effectiveness check is a raw ApiVersions to the node's own address: it must fail while
the node is down or paused; for bounce/restart a connection opened before the fault must
be cut by it. On the reference broker a kill is a crash: the node's in-memory state is
lost and rebuilt from the persisted records. isolate (reference only) makes a node
unreachable while it keeps its memory, and heals by letting it rejoin.
"""

from __future__ import annotations

from typing import Any

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.common import TargetInjector
from chaos.nemesis.probe import api_versions_ok, wait_answering
from targets.target import NotSupportedByTarget
from reference_impl.client.raw_client import RawClient

HEAL_TIMEOUT_S = 180.0
_REFERENCE_NOTE = {
    "isolate": "; reference broker: the isolated node keeps its in-memory state",
}
_CRASH_NOTE = "; reference broker: the node's in-memory state is lost and rebuilt from its records"


class ProcessNemesis(TargetInjector):
    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in self.kinds:
            raise ValueError(f"process nemesis cannot inject {spec.kind!r}")
        nodes = self.nodes_for(spec)
        record = self.start_record(spec, nodes)
        try:
            inject = _INJECT[spec.kind]
            evidence = [inject(self, n) for n in nodes]
        except NotSupportedByTarget:
            self.open.remove(record)
            raise
        record.effective = all(ok for ok, _ in evidence)
        note = _REFERENCE_NOTE.get(spec.kind, _CRASH_NOTE) if self.target.kind == "reference" and spec.kind != "pause" else ""
        record.evidence = "; ".join(e for _, e in evidence) + note
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        for n in record.nodes:
            if record.spec.kind in ("kill", "stop"):
                self.target.restart_node(n)
            elif record.spec.kind == "pause":
                self.target.resume_node(n)
            elif record.spec.kind == "isolate":
                self.target.rejoin_node(n)
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
        self.target.stop_node(node_id)
        return self._down_check(node_id, "stopped")

    def _isolate(self, node_id: int) -> tuple[bool, str]:
        self.target.isolate_node(node_id)
        return self._down_check(node_id, "isolated")

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


_INJECT = {"kill": ProcessNemesis._kill, "stop": ProcessNemesis._stop, "pause": ProcessNemesis._pause,
           "bounce": ProcessNemesis._bounce, "restart": ProcessNemesis._restart, "isolate": ProcessNemesis._isolate}
"""Each fault kind and the method that injects it on one node."""
ProcessNemesis.kinds = tuple(_INJECT)
