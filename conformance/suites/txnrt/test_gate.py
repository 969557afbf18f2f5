"""The suite's own gate: on a target without the draft every test is "not supported by
target" (none passes or fails), detected from ApiVersions' supported/finalized features."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients import wire
from conformance.suites.txnrt import FEATURE, missing_capability
from conformance.suites.txnrt.conftest import enable_on_reference, require_txnrt, set_level
from targets.target import NotSupportedByTarget

SUITE_DIR = Path(__file__).parent


def _suite_items(session) -> list:
    return [i for i in session.items if Path(str(i.fspath)).parent == SUITE_DIR]


@pytest.mark.requirement("KIP-TXNRT.BLOCK.005")
def test_without_the_draft_every_suite_test_is_not_supported(target, request):
    """Every other test of the suite goes through the `rt` fixture. On a target that lacks the
    feature (every Apache Kafka, librdkafka's mock) the fixture raises NotSupportedByTarget
    with the reason read from ApiVersions; on the reference the check is made with the level
    lowered to 0 (reported as finalized below 1), then the level is restored. After its
    checks, on a target without the draft this test is itself "not supported by target"."""
    others = [i for i in _suite_items(request.session) if i.originalname != request.node.originalname]
    assert others, "no txnrt tests collected next to this one"
    ungated = [i.nodeid for i in others if "rt" not in i.fixturenames]
    assert not ungated, f"tests that bypass the txnrt gate: {ungated}"
    with wire.cluster_client(target) as cc:
        if target.kind == "reference":
            restore = enable_on_reference(target, cc)
            try:
                set_level(cc, 0)
                reason = missing_capability(cc.bootstrap)
                assert reason == f"KIP-TXNRT: {FEATURE} is supported up to 1 but finalized at 0", reason
            finally:
                set_level(cc, 1 if restore is None else restore)
            return
        reason = missing_capability(cc.bootstrap)
        if reason is None:
            return  # a target with the draft: the gate lets the tests run
        assert reason.startswith("KIP-TXNRT: ") and FEATURE in reason, reason
        with pytest.raises(NotSupportedByTarget) as excinfo:
            require_txnrt(target, cc)
        assert excinfo.value.reason == reason
    # The gate held; the target still lacks the draft, so this test reports that too (a pass
    # here would count as BLOCK.005 implemented by a broker that does not have it).
    raise NotSupportedByTarget(reason)
