"""The draft round-trip KIP's pure rules (reference_impl/model/txn_roundtrip.py): which adds
are held, and only at the finalized level."""

from __future__ import annotations

import pytest

from reference_impl.model import txn_roundtrip as rt
from reference_impl.model.broker_config import BrokerConfig
from reference_impl.model.transaction_log import TransactionLogValue
from reference_impl.model.transaction_state import TransactionState as S


def value(state: S) -> TransactionLogValue:
    return TransactionLogValue(1, -1, -1, 0, -1, 60_000, state, (("t", (0,)),), (), 0, 0, 0)


@pytest.mark.parametrize("state", list(S))
def test_only_decided_transactions_with_pending_markers_hold_an_add(state):
    assert rt.is_held(value(state)) is state.is_prepare
    assert rt.is_held(None) is False


def test_level_and_version_gate():
    assert not rt.may_hold({}, 3)  # default: Kafka's behaviour
    assert not rt.may_hold({rt.FEATURE: 0}, 0)
    assert all(rt.may_hold({rt.FEATURE: 1}, v) for v in range(4))
    assert not rt.may_hold({rt.FEATURE: 1}, 4) and not rt.may_hold({rt.FEATURE: 1}, 5)  # broker-sent forms


def test_reference_supports_but_does_not_finalize_the_level():
    cfg = BrokerConfig()
    assert cfg.supported_features[rt.FEATURE] == rt.SUPPORTED and rt.FEATURE not in cfg.finalized_features
