"""Model-based differential test of transactions (Hypothesis stateful), see
conformance/txn_model_machine.py for the machine, its rules and its observations.

* `test_transactions_match_model_and_reference`: the target (any kind; the reference
  target makes it a self check) against a private reference cluster per example, in
  lockstep: init (fencing), begin, send, commit, abort, misuse (calls in wrong states),
  with read_committed / read_uncommitted reads, HW and LSO after every step. Every
  observation is compared with the reference (normalized) and checked against the model.
* `test_transactions_with_timeouts_and_coordinator_restart`: the same machine plus the
  rules a real broker cannot run in lockstep -- moving a ManualClock past the transaction
  timeout, and rebuilding the transaction coordinator from its log. Both sides are private
  reference clusters (the target side with the target's node count), so it only runs
  for reference targets: the transaction timeout runs on wall time in Kafka (lockstep
  would need a real wait of timeout + abort scan per step and would abort other steps'
  transactions spontaneously), and a kafka-native node restart takes seconds. It runs
  under TV2 and with the reference emulating a TV1 cluster. (A one-off real-wait probe
  against kafka-native 4.4.0 -- send / commit / abort after a 1 s transaction timeout --
  gave the same outcomes as the reference's ManualClock run; see the machine docstring.)
* Targets the reference transactional producer cannot drive (ApiVersions below v3, as
  librdkafka's mock) are not_supported.

Settings: derandomized, no example database, few examples and steps (CI-fast and
deterministic); a failure prints the minimal step sequence Hypothesis shrank it to.
"""

from __future__ import annotations

import itertools

import pytest

from conformance.suites import NotSupportedByTarget, require_api
from conformance.txn_model_machine import (
    ExistingCluster,
    MachineConfig,
    PrivateReference,
    default_settings,
    run_machine,
)
from reference_impl.protocol.api_keys import ApiKey

REQUIREMENTS = (
    "KIP-98.TXN.001",
    "KIP-98.TXN.003",
    "KIP-98.TXN.005",
    "KIP-98.FENCE.001",
    "KIP-98.FENCE.002",
    "KIP-98.FENCE.004",
    "KIP-98.ENDTXN.001",
    "KIP-98.LSO.001",
    "KIP-98.LSO.002",
    "KIP-98.FETCH.003",
    "KIP-98.FETCH.004",
)

MAX_EXAMPLES = 20
STEPS = 15

# InitProducerId, AddPartitionsToTxn, EndTxn; Fetch v4+ and ListOffsets v2+ (isolation level)
_APIS = ((22, None, "InitProducerId"), (24, None, "AddPartitionsToTxn"), (26, None, "EndTxn"))
CREATE_TOPICS = ApiKey.CREATE_TOPICS


def _transaction_version(capabilities) -> int:
    for key, version, what in _APIS:
        require_api(capabilities, key, version, what=what)
    if (capabilities.max_version(ApiKey.FETCH) or 0) < 4:
        raise NotSupportedByTarget("Fetch v4+ (isolation level) is not advertised")
    if (capabilities.max_version(ApiKey.LIST_OFFSETS) or 0) < 2:
        raise NotSupportedByTarget("ListOffsets v2+ (isolation level) is not advertised")
    tv = capabilities.feature("transaction.version")
    return 2 if tv >= 2 else 1


def _names(unique) -> object:
    counter = itertools.count(1)
    return lambda: unique(f"m{next(counter)}")


@pytest.mark.slow(3)
@pytest.mark.requirement(*REQUIREMENTS)
def test_transactions_match_model_and_reference(target, capabilities, unique):
    tv = _transaction_version(capabilities)
    # Targets without CreateTopics provision topics by their provider's own means.
    provision = None if capabilities.supports_api(CREATE_TOPICS) else target.provision_topic
    config = MachineConfig(
        make_target=lambda: ExistingCluster(target.bootstrap_servers, provision, target.raw_security()),
        make_reference=lambda: PrivateReference(brokers=1, transaction_version=tv),
        names=_names(unique),
        time_rules=False,
    )
    run_machine(config, default_settings(MAX_EXAMPLES, STEPS, shrink=False))


@pytest.mark.slow(3)
@pytest.mark.requirement(*REQUIREMENTS, "KIP-98.TIMEOUT.001", "KIP-98.COORD.004", "KIP-98.LSO.003")
@pytest.mark.parametrize("nodes", [1, 3], ids=["nodes=1", "nodes=3"])
@pytest.mark.parametrize("transaction_version", [2, 1], ids=["tv2", "tv1"])
def test_transactions_with_timeouts_and_coordinator_restart(unique, transaction_version, nodes):
    """Self check of the reference with the time and restart rules (time cannot be moved on a
    real cluster in lockstep), under TV2 and emulating a TV1 cluster (finalized
    transaction.version=1); independent of --target, it runs once per configuration."""
    tv = transaction_version
    config = MachineConfig(
        make_target=lambda: PrivateReference(brokers=nodes, transaction_version=tv),
        make_reference=lambda: PrivateReference(brokers=1, transaction_version=tv),
        names=_names(unique),
        time_rules=True,
        close_target=True,
    )
    run_machine(config, default_settings(MAX_EXAMPLES, STEPS))
