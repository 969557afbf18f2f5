"""Model-based differential test of share groups (Hypothesis stateful), see
conformance/share_model_machine.py for the machine, its steps and its observations.

* `test_share_partition_matches_model_and_reference`: the target against a private
  reference cluster per example, in lockstep: members joining and leaving, fetches, each
  acknowledgement type (by the holder, and by a member that does not hold the record),
  producing, and real waits past the record lock (2000 ms). Every outcome is compared with
  the reference's (per offset, without member or topic ids) and checked against the
  abstract share-partition model. Against Kafka 4.1 the private reference and the model use
  4.1.2's session-close rule (released records keep their count; findings doc item 11),
  reported as a test property.
* `test_share_partition_self_check_with_manual_clock`: reference against reference with a
  ManualClock on both sides (``wait`` moves the clocks, no sleeping): more examples and
  steps for the same cost, independent of --target.
* Targets that cannot set group configs (librdkafka's mock: no IncrementalAlterConfigs) are
  not supported: the machine needs `share.auto.offset.reset=earliest` and a short lock.

Settings: derandomized, no example database, few examples and steps (CI time). Against a
real target there is no shrinking (it would replay sequences against the broker for
minutes): a failure prints the whole step sequence; the self check shrinks.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from conformance import target_limits
from clients import share
from conformance.share_model_machine import (
    LOCK_MS,
    ExistingCluster,
    MachineConfig,
    PrivateReference,
    default_settings,
    run_machine,
)
from targets.target import NotSupportedByTarget
from reference_impl.protocol.api_keys import ApiKey

REQUIREMENTS = (
    "KIP-932.STATE.003",
    "KIP-932.STATE.004",
    "KIP-932.STATE.005",
    "KIP-932.STATE.006",
    "KIP-932.STATE.008",
    "KIP-932.LOCK.001",
    "KIP-932.ACK.001",
    "KIP-932.ACK.002",
    "KIP-932.ACK.003",
    "KIP-932.CLIENT.005",
)

MAX_EXAMPLES = 6
STEPS = 15
SELF_CHECK_EXAMPLES = 10
SELF_CHECK_STEPS = 15
CREATE_TOPICS = ApiKey.CREATE_TOPICS


def _names(unique) -> object:
    counter = itertools.count(1)
    return lambda: unique(f"s{next(counter)}")


def _is_kafka_41(target) -> bool:
    return target.kind == "kafka-native" and (target.version or "").startswith("4.1.")


def _require_machine_lock(target) -> None:
    """The machine runs the private reference with a LOCK_MS lock and waits past it up to
    once a step; a target whose minimum lock is longer (Kafka's default minimum: 15 s)
    cannot match it, and a longer lock on both sides would wait minutes per example."""
    minimum = target_limits.limits(target)["group.share.min.record.lock.duration.ms"]
    if minimum > LOCK_MS:
        raise NotSupportedByTarget(
            f"the machine's {LOCK_MS} ms record lock is below this target's minimum {minimum} ms, and waiting "
            f"past a {minimum} ms lock up to {STEPS} times in {MAX_EXAMPLES} examples would take "
            f"{MAX_EXAMPLES * STEPS * minimum / 1000:.0f} s: lower the broker setting "
            f"group.share.min.record.lock.duration.ms to {LOCK_MS} or less to run this test")


@pytest.mark.slow
@pytest.mark.requirement(*REQUIREMENTS)
def test_share_partition_matches_model_and_reference(target, capabilities, unique, record_property):
    share.require_share_groups(target)
    if not capabilities.supports_api(share.INCREMENTAL_ALTER_CONFIGS):
        raise NotSupportedByTarget("group configs cannot be set (no IncrementalAlterConfigs): the machine "
                                   "needs share.auto.offset.reset=earliest and a 2000 ms record lock")
    _require_machine_lock(target)
    provision = None if capabilities.supports_api(CREATE_TOPICS) else target.provision_topic
    close_decrements = _is_kafka_41(target)
    record_property("close_decrements_delivery_count", close_decrements)
    steps: list[dict] = []
    config = MachineConfig(
        make_target=lambda: ExistingCluster(target.bootstrap_servers, provision, target.raw_security()),
        make_reference=lambda: PrivateReference(close_decrements_count=close_decrements),
        names=_names(unique),
        close_decrements_count=close_decrements,
        on_step=steps.append,
    )
    run_machine(config, default_settings(MAX_EXAMPLES, STEPS, shrink=False))
    ops = Counter(s["op"] for s in steps)
    record_property("model_steps", dict(sorted(ops.items())))
    assert {"fetch", "ack"} <= set(ops), f"the examples never fetched and acknowledged: {dict(ops)}"


@pytest.mark.slow(2)
@pytest.mark.requirement(*REQUIREMENTS)
@pytest.mark.parametrize("close_decrements", [False, True], ids=["kafka-4.4-close", "kafka-4.1-close"])
def test_share_partition_self_check_with_manual_clock(unique, close_decrements):
    """Reference vs reference on ManualClocks, under both session-close rules; independent
    of --target, it runs once per configuration."""
    config = MachineConfig(
        make_target=lambda: PrivateReference(manual_clock=True, close_decrements_count=close_decrements),
        make_reference=lambda: PrivateReference(manual_clock=True, close_decrements_count=close_decrements),
        names=_names(unique),
        manual_clock=True,
        close_decrements_count=close_decrements,
        close_target=True,
    )
    run_machine(config, default_settings(SELF_CHECK_EXAMPLES, SELF_CHECK_STEPS))
