"""The pure parts of the nemesis layer: seeded schedules, routing, request-fault matching."""

from __future__ import annotations

import pytest
from kio.schema.end_txn.v0.request import EndTxnRequest
from kio.schema.errors import ErrorCode

from chaos.nemesis.base import FaultSpec, Nemesis
from chaos.nemesis.compose import ComposedNemesis, schedule
from chaos.nemesis.network import NetworkNemesis
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.request import RequestNemesis
from chaos.nemesis.request_faults import RequestFault, RequestFaultHook, RequestMatch, error_response_frame
from reference_impl.protocol import framing

SPECS = [FaultSpec("kill"), FaultSpec("partition"), FaultSpec("latency", params=(("ms", 200),))]


def test_schedule_is_a_function_of_its_seed():
    a = schedule(42, SPECS, 300, 10)
    assert a == schedule(42, SPECS, 300, 10)
    assert a != schedule(43, SPECS, 300, 10)


def test_schedule_windows_gap_and_final_recovery():
    windows = schedule(7, SPECS, 300, 10, recovery_s=40)
    assert windows and windows[0].start_s == 10
    for prev, nxt in zip(windows, windows[1:]):
        assert nxt.start_s - prev.end_s == pytest.approx(10, abs=0.01)
    assert all(5 <= w.end_s - w.start_s <= 15 for w in windows)
    assert windows[-1].end_s <= 260
    assert {w.spec.kind for w in windows} == {"kill", "partition", "latency"}


def test_schedule_without_specs_or_room_is_empty():
    assert schedule(1, [], 100, 10) == []
    assert schedule(1, SPECS, 15, 10) == []


def test_injectors_satisfy_the_protocol_and_compose_routes_by_kind():
    process, request = ProcessNemesis(), RequestNemesis(hook=RequestFaultHook())
    network = NetworkNemesis(network=None)  # type: ignore[arg-type]
    for inj in (process, request, network):
        assert isinstance(inj, Nemesis)
    composed = ComposedNemesis([process, network, request])
    assert isinstance(composed, Nemesis)
    assert composed.injector_for(FaultSpec("pause")) is process
    assert composed.injector_for(FaultSpec("blackhole")) is network
    assert composed.injector_for(FaultSpec("hold-endtxn")) is request
    with pytest.raises(ValueError, match="no injector"):
        composed.injector_for(FaultSpec("hijack"))
    with pytest.raises(ValueError, match="two injectors"):
        ComposedNemesis([process, ProcessNemesis()])


def _frame(payload, corr=5):
    return framing.encode_request(payload, corr)[4:]


def test_hook_matches_key_node_and_transactional_id_and_counts():
    end_txn = EndTxnRequest(transactional_id="tx-a", producer_id=1, producer_epoch=0, committed=True)
    key = int(EndTxnRequest.__api_key__)
    hook = RequestFaultHook()
    fault = hook.add(RequestFault(RequestMatch(key, node=2, transactional_id="tx-a"), "hold", ms=250, limit=1))
    assert hook.decide(1, key, 0, _frame(end_txn)) is None  # other node
    other = EndTxnRequest(transactional_id="tx-b", producer_id=1, producer_epoch=0, committed=True)
    assert hook.decide(2, key, 0, _frame(other)) is None  # other transactional id
    verdict = hook.decide(2, key, 0, _frame(end_txn))
    assert verdict.action == "hold" and verdict.delay_s == 0.25
    assert hook.decide(2, key, 0, _frame(end_txn)) is None  # limit reached
    assert hook.remove(fault) == 1


def test_error_answer_decodes_with_the_error():
    key = int(EndTxnRequest.__api_key__)
    frame = error_response_frame(key, 3, 9, ErrorCode.coordinator_load_in_progress)
    decoded = framing.decode_response_frame(frame[4:], key, 3)
    assert decoded.correlation_id == 9 and decoded.body.error_code == ErrorCode.coordinator_load_in_progress
