"""KIP-447 lowers the broker's scan for timed-out transactions
(transaction.abort.timed.out.transaction.cleanup.interval.ms) from one minute to 10 s, so
that a zombie's open transaction, which holds the LSO and blocks its successor's
read_committed consumers, is aborted within about timeout + 10 s.

The default is checked where the target leaves the setting unset (DescribeConfigs source
DEFAULT_CONFIG; kafka-native sets 1 s); on every target the abort of a stalled
transaction must come within its timeout plus the interval the broker reports, plus slack
for marker writes on a loaded machine.
"""

from __future__ import annotations

import pytest

from conformance import target_limits
from clients import confluent, wire
from clients.txn import add_partitions_ok, init_ok, produce_txn_ok
from conformance.suites.kip98 import idem_batch, require_transactions
from conformance.suites.kip98.test_timeouts import wait_for_abort_marker
from conformance.suites.kip98.test_transaction_log_topic import broker_settings, is_unset

SETTING = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
KIP_DEFAULT_MS = 10_000
TXN_TIMEOUT_MS = 1_000
SLACK_S = 8.0


@pytest.mark.requirement("KIP-447.CONFIG.001")
def test_timed_out_transactions_are_aborted_within_the_scan_interval(target, unique):
    """KIP-447.CONFIG.001: default 10 s when unset; the abort comes within timeout + the reported interval."""
    require_transactions(target.capabilities())
    entry = broker_settings(target, [SETTING])[SETTING]
    if is_unset(entry):
        assert int(entry.value) == KIP_DEFAULT_MS, f"{SETTING} defaults to {entry.value}, KIP-447 says {KIP_DEFAULT_MS}"
    bound_s = TXN_TIMEOUT_MS / 1000 + int(entry.value) / 1000 + SLACK_S
    target_limits.require_wait(bound_s, "the abort of a timed-out transaction", SETTING)
    topic, tid = unique.topic(), unique.transactional_id()
    confluent.create_topic(target, topic)
    with wire.cluster_client(target) as cc:
        coord, init, _ = init_ok(cc, tid, timeout_ms=TXN_TIMEOUT_MS)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add_partitions_ok(coord, tid, pid, epoch, topic, [0])
        _, produced = produce_txn_ok(cc.leader_for(topic, 0), tid, topic, 0, idem_batch(["stalled"], pid, epoch, 0, True))
        assert int(produced.error_code) == 0, f"transactional produce answered {int(produced.error_code)}"
        waited = wait_for_abort_marker(cc, topic, 0, pid, deadline_s=bound_s)
    assert waited is not None, (
        f"a transaction with a {TXN_TIMEOUT_MS} ms timeout was not aborted within {bound_s:.0f} s "
        f"({SETTING}={entry.value})")
