"""The pure parts of the nemesis layer: the injector protocol, request-fault matching."""

from __future__ import annotations

from kio.schema.end_txn.v0.request import EndTxnRequest
from kio.schema.errors import ErrorCode

from chaos.nemesis.base import Nemesis
from chaos.nemesis.network import NetworkNemesis
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.request import RequestNemesis
from chaos.nemesis.request_faults import RequestFault, RequestFaultHook, RequestMatch, error_response_frame
from reference_impl.protocol import framing


def test_injectors_satisfy_the_protocol():
    process, request = ProcessNemesis(), RequestNemesis(hook=RequestFaultHook())
    network = NetworkNemesis(network=None)  # type: ignore[arg-type]
    for inj in (process, request, network):
        assert isinstance(inj, Nemesis)


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
