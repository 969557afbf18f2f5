"""The group protocol a KIP-447 test runs its group under (issue 28): `group_protocol` is
parametrized by `both_protocols(...)` (conformance/suites/kip447/__init__.py) or asked for
directly by the consumer-protocol-only tests through `consumer_protocol`. The consumer
half passes the capability gate first: a target whose ApiVersions lacks
ConsumerGroupHeartbeat (key 68) is "not supported by target" for it."""

from __future__ import annotations

from typing import Any

import pytest

from clients import wire
from clients.groups import CONSUMER, consumer_protocol_missing
from conformance.capability_gate import require_capability


def _nothing_to_enable(target: Any, cc: Any) -> None:
    """No feature update switches KIP-848 on here: a target answers ConsumerGroupHeartbeat
    or it does not (Kafka 4.x finalizes group.version 1 by default)."""
    return None


def gate_consumer_protocol(target: Any) -> None:
    with wire.cluster_client(target) as cc:
        require_capability(target, cc, consumer_protocol_missing, _nothing_to_enable)


@pytest.fixture
def group_protocol(request: pytest.FixtureRequest, target: Any) -> str:
    protocol = request.param
    if protocol == CONSUMER:
        gate_consumer_protocol(target)
    return protocol


@pytest.fixture
def consumer_protocol(target: Any) -> str:
    gate_consumer_protocol(target)
    return CONSUMER
