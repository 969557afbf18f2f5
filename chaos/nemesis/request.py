"""Per-request (L7) faults as a nemesis: hold, delay, drop or answer-with-error requests
matched by api key, version, node and transactional id.

Two carriers, one hook (chaos.nemesis.request_faults): the reference broker asks it
before serving each request (deterministic), and on every other target a capture proxy
in front of every broker (chaos.nemesis.request_proxy; replay/proxy.py's fault seam)
asks it before forwarding. Then the workload's clients bootstrap through that proxy
(``client_view``), which rewrites every advertised endpoint to itself.
``hold-endtxn`` holds EndTxn for ``ms`` (KAFKA-17754's starting condition). The hook
counts matches: a fault that matched no request is not effective.

params: ``api_key`` (hold/delay/drop/error), ``versions`` (lo, hi), ``node``,
``transactional_id``, ``ms``, ``error`` (a kio ErrorCode name), ``limit`` (requests to
fault; default 1, 0 = every match while active).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from chaos.nemesis.base import FaultRecord, FaultSpec
from chaos.nemesis.common import TargetInjector
from chaos.nemesis.request_faults import RequestFault, RequestFaultHook, RequestMatch
from chaos.nemesis.request_proxy import ProxiedTarget, RequestProxy
from chaos.nemesis.select import resolve_role
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey

END_TXN = ApiKey.END_TXN
_ACTION = {"hold-endtxn": "hold", "hold": "hold", "delay": "delay", "drop": "drop", "error": "error"}


class RequestNemesis(TargetInjector):
    kinds = tuple(_ACTION)

    def __init__(self, hook: RequestFaultHook | None = None, seed: int = 0) -> None:
        """``hook``: one already installed in a capture proxy the caller runs; None: the
        target's broker seam (the reference) or, lacking one, our own capture proxy."""
        super().__init__(seed)
        self.hook = hook
        self._installed = False
        self.proxy: RequestProxy | None = None
        self._faults: dict[int, RequestFault] = {}

    def setup(self, target: Any) -> None:
        super().setup(target)
        if self.hook is not None:
            return
        self.hook = RequestFaultHook()
        try:
            target.install_request_hook(self.hook)
            self._installed = True
        except NotSupportedByTarget:
            self.proxy = RequestProxy(target, self.hook).start()

    @property
    def carrier(self) -> str:
        return "capture-proxy" if self.proxy is not None else "broker" if self._installed else "caller's proxy"

    def client_view(self, target: Any) -> Any:
        """The target the workload's clients must use: through our capture proxy if we run
        one (else the faults would never see their requests)."""
        return target if self.proxy is None else ProxiedTarget(target, self.proxy.bootstrap_servers)

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in _ACTION:
            raise ValueError(f"request nemesis cannot inject {spec.kind!r}")
        node = self._node(spec)
        fault = self._fault(spec, node)
        record = self.start_record(spec, (node,) if node is not None else tuple(self.target.node_ids))
        record.details["fault_id"] = fault.fault_id
        record.details["carrier"] = self.carrier
        if self.proxy is not None:
            record.details["proxy_listeners"] = self.proxy.listeners()
        self._faults[fault.fault_id] = fault
        assert self.hook is not None
        self.hook.add(fault)
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        fault = self._faults.pop(record.details.get("fault_id", -1), None)
        matched = 0 if fault is None or self.hook is None else self.hook.remove(fault)
        record.details["matched"] = matched
        record.effective = matched > 0
        record.evidence = f"{matched} matching request(s) {_ACTION[record.spec.kind]} (in the {self.carrier})"
        return self.close_record(record)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self._installed:
                self.target.install_request_hook(None)
                self._installed = False
            if self.proxy is not None:
                self.proxy.stop()
                self.proxy = None

    def _node(self, spec: FaultSpec) -> int | None:
        if spec.target == "role":
            return resolve_role(spec, self.admin_bootstrap())
        node = spec.param("node")
        return None if node is None else int(node)

    @staticmethod
    def _fault(spec: FaultSpec, node: int | None) -> RequestFault:
        p = spec.param
        api_key = END_TXN if spec.kind == "hold-endtxn" else p("api_key")
        if api_key is None:
            raise ValueError(f"fault {spec.name} needs params api_key")
        versions = p("versions")
        limit = int(p("limit", 1))
        return RequestFault(
            RequestMatch(int(api_key), tuple(versions) if versions else None, node, p("transactional_id")),
            _ACTION[spec.kind],
            ms=int(p("ms", 2000 if spec.kind == "hold-endtxn" else 0)),
            error_code=ErrorCode[p("error", "unknown_server_error")],
            limit=limit or None,
        )
