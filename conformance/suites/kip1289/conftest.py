"""The KIP-1289 capability gate as a fixture every test of the suite uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest
from kio.schema.errors import ErrorCode as E

from clients import wire
from conformance.capability_gate import require_capability
from clients.share import SharePartitionUnderTest, require_share_groups, set_group_configs_if_known
from conformance.suites.kip1289 import (
    UNSAFE_DOWNGRADE, Txn, finalized_level, missing_capability, update_features, wait_for,
)
from reference_impl.client.raw_client import ClusterClient


@dataclass
class Kip:
    target: Any
    cc: ClusterClient
    unique: Any

    def share_partition(self, partitions: int = 1, configs: dict[str, str] | None = None,
                        replication: int | None = None) -> SharePartitionUnderTest:
        sp = SharePartitionUnderTest(self.target, self.cc, self.unique.topic(), self.unique.group(), partitions)
        if replication is None:
            return sp.open(configs)
        require_share_groups(self.target)  # a replicated topic, for leadership moves
        assert wire.create_topic(self.cc, sp.topic, partitions, replication) == E.none
        if configs:
            set_group_configs_if_known(self.cc, sp.group, configs)
        sp.tid = sp.wait_topic_id()
        return sp

    txns: list[Txn] = field(default_factory=list)

    def txn(self, timeout_ms: int = 60_000) -> Txn:
        txn = Txn(self.cc, self.unique.transactional_id(), timeout_ms=timeout_ms).init()
        self.txns.append(txn)
        return txn

    def abort_open_transactions(self) -> None:
        """Teardown: a test's transactions left open would hold TX_PENDING records (and block
        share.version downgrades) for the rest of the session; abort them, best effort."""
        with wire.cluster_client(self.target) as cc:
            for txn in self.txns:
                txn.cc = cc
                try:
                    txn.end(committed=False, wait_s=5)
                except Exception:  # noqa: BLE001 - cleanup must not mask the test's verdict
                    pass


def enable_on_reference(target: Any, cc: ClusterClient) -> int | None:
    """Raise share.version to 2 on the reference (which supports it, finalized 1 by default);
    returns the level to restore, None when nothing was changed. Never touches other targets."""
    if target.kind != "reference":
        return None
    before = finalized_level(cc.bootstrap, "share.version")
    if before >= 2:
        return None
    resp = update_features(cc.bootstrap, {"share.version": 2})
    assert resp.error_code == E.none, resp
    wait_for(lambda: missing_capability(cc.bootstrap) is None, "api key 93 after share.version=2", 10)
    return before


def require_kip1289(target: Any, cc: ClusterClient) -> int | None:
    """The gate: NotSupportedByTarget unless the target has KIP-1289, after enabling it on
    the reference; returns the share.version level to restore afterwards (or None)."""
    return require_capability(target, cc, missing_capability, enable_on_reference)


@pytest.fixture
def kip(target, unique) -> Iterator[Kip]:
    """NotSupportedByTarget unless the target has KIP-1289 (after enabling it on the reference)."""
    with wire.cluster_client(target) as cc:
        restore = require_kip1289(target, cc)
        kip = Kip(target, cc, unique)
        try:
            yield kip
        finally:
            kip.abort_open_transactions()
            if restore is not None:  # a fresh client: the test may have restarted nodes
                with wire.cluster_client(target) as fresh:
                    update_features(fresh.bootstrap, {"share.version": restore}, UNSAFE_DOWNGRADE)
