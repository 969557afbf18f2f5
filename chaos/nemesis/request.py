"""Per-request (L7) faults as a nemesis: hold, delay, drop or answer-with-error requests
matched by api key, version, node and transactional id.

Two carriers, one hook (chaos.nemesis.request_faults): the reference broker asks it
before serving each request (deterministic), and the capture proxy (replay/proxy.py)
asks it before forwarding, which works for any target (its upstreams are whatever the
brokers advertise, so behind a ToxiproxyNetwork they are the fault proxies).
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
from chaos.nemesis.select import resolve_role
from fixtures.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey

END_TXN = ApiKey.END_TXN
_ACTION = {"hold-endtxn": "hold", "hold": "hold", "delay": "delay", "drop": "drop", "error": "error"}


class RequestNemesis(TargetInjector):
    kinds = tuple(_ACTION)

    def __init__(self, hook: RequestFaultHook | None = None, seed: int = 0) -> None:
        """``hook``: one already installed in a capture proxy; None: install one in the
        target's broker (the reference broker has the seam)."""
        super().__init__(seed)
        self.hook = hook
        self._installed = False
        self._faults: dict[int, RequestFault] = {}

    def setup(self, target: Any) -> None:
        super().setup(target)
        if self.hook is None:
            if not hasattr(target, "install_request_hook"):
                raise NotSupportedByTarget(
                    f"{target.kind} has no per-request fault seam; put the capture proxy in front of it")
            self.hook = RequestFaultHook()
            target.install_request_hook(self.hook)
            self._installed = True

    def invoke(self, spec: FaultSpec) -> FaultRecord:
        if spec.kind not in _ACTION:
            raise ValueError(f"request nemesis cannot inject {spec.kind!r}")
        node = self._node(spec)
        fault = self._fault(spec, node)
        record = self.start_record(spec, (node,) if node is not None else tuple(self.target.node_ids))
        record.details["fault_id"] = fault.fault_id
        self._faults[fault.fault_id] = fault
        assert self.hook is not None
        self.hook.add(fault)
        return record

    def heal(self, record: FaultRecord) -> FaultRecord:
        fault = self._faults.pop(record.details.get("fault_id", -1), None)
        matched = 0 if fault is None or self.hook is None else self.hook.remove(fault)
        record.details["matched"] = matched
        record.effective = matched > 0
        record.evidence = f"{matched} matching request(s) {_ACTION[record.spec.kind]}"
        return self.close_record(record)

    def teardown(self) -> None:
        super().teardown()
        if self._installed:
            self.target.install_request_hook(None)
            self._installed = False

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
