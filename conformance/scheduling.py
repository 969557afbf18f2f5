"""Target-affinity scheduling for pytest-xdist: `--dist loadscope` under the kipcheck plugin.

Under `--dist loadfile` a worker runs every target of each file it gets, so each of the 4
workers ends up holding its own Kafka JVMs for every JVM-backed target (30+ brokers on a
2-core machine, each ~3% of a core while idle, held to the end of the session). Here a test
on a JVM-backed target (kafka-native, testcontainers) is scheduled with the other tests of
the same target and suite bucket, so only a few workers start each cluster, and the worker
stops it once that unit of work is done (`TargetPool.retire`). Every other test is
scheduled by file, as loadfile does. Scopes are handed out in collection order
(`--no-loadscope-reorder`), where `slow`-marked tests come first. The plugin's xdist hooks
that choose the scheduler, and its teardown's `retire_if_done`, are here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling, LoadScopeScheduling

from targets.target import CLUSTER_KINDS

from conformance.items import item_spec
from conformance.state import state_of

# The KIP-932 suite is the largest on every cluster target: a bucket of its own lets two
# workers share a target's work (two clusters of it, not one per worker).
_OWN_BUCKET_SUITES = ("kip932",)


def cluster_spec_of(nodeid: str, cluster_specs: Sequence[str]) -> str | None:
    """The JVM-backed target a test id runs on: one of `cluster_specs` between the
    brackets, alone or joined to other parameter ids with "-" (pytest's id scheme)."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return None
    params = nodeid[nodeid.index("[") + 1:-1]
    for spec in sorted(cluster_specs, key=len, reverse=True):
        if params == spec or params.startswith(f"{spec}-") or params.endswith(f"-{spec}") or f"-{spec}-" in params:
            return spec
    return None


def scope_of(nodeid: str, cluster_specs: Sequence[str]) -> str:
    path = nodeid.split("::", 1)[0]
    spec = cluster_spec_of(nodeid, cluster_specs)
    if spec is None:
        return path
    parts = path.split("/")
    suite = parts[2] if len(parts) > 3 and parts[:2] == ["conformance", "suites"] else ""
    return f"{spec}|{suite if suite in _OWN_BUCKET_SUITES else 'other'}"


class CrashSafeScopes:
    """xdist 3.8's LoadScopeScheduling.remove_node, when a worker dies (kipcheck's deadline
    ends a worker stuck in a C call), puts the worker's whole workload back in the queue:
    its finished units too, and the crashed test as still pending. A finished unit handed
    out later sends no test, so a worker holding its last test (it runs one only when the
    next is known) waits for good and the run hangs; the crashed test would run again.
    Here only units with tests left go back, without the crashed test (as `--dist load`)."""

    def remove_node(self, node):
        workload = self.assigned_work.pop(node)
        left = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not left:
            return None
        crashitem = next(nodeid for unit in left.values() for nodeid, done in unit.items() if not done)
        left[self._split_scope(crashitem)][crashitem] = True  # reported as crashed by DSession
        self.workqueue.update((scope, unit) for scope, unit in left.items() if not all(unit.values()))
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem


class CrashSafeLoadFileScheduling(CrashSafeScopes, LoadFileScheduling):
    """`--dist loadfile` with the crash fix above."""


class TargetAffinityScheduling(CrashSafeScopes, LoadScopeScheduling):
    def __init__(self, config, log=None, cluster_specs: Iterable[str] = ()) -> None:
        super().__init__(config, log)
        self.cluster_specs = tuple(cluster_specs)

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid, self.cluster_specs)


def retire_if_done(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Under target-affinity scheduling a cluster target's tests reach a worker as one unit:
    when the next test is on another target, the unit is done and its brokers go."""
    if nextitem is None or not _affinity_scheduled(item.config):
        return
    spec = item_spec(item)
    if spec is None or spec.kind not in CLUSTER_KINDS:
        return
    following = item_spec(nextitem)
    if following is None or following.raw != spec.raw:
        state_of(item.config).pool.retire(spec)


_AFFINITY_KEY = "kipcheck_target_affinity"


def _affinity_scheduled(config: pytest.Config) -> bool:
    """On a worker (whose own `dist` option xdist sets to "no"): told by the controller."""
    return bool(getattr(config, "workerinput", {}).get(_AFFINITY_KEY))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[_AFFINITY_KEY] = node.config.getoption("dist", None) == "loadscope"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any):
    """`--dist loadscope`: target-affinity scheduling; `--dist loadfile`: xdist's, fixed so a
    crashed worker cannot hang the run (CrashSafeScopes)."""
    dist = config.getoption("dist", None)
    if dist == "loadfile":
        return CrashSafeLoadFileScheduling(config, log)
    if dist != "loadscope":
        return None
    clusters = [s.raw for s in state_of(config).specs if s.kind in CLUSTER_KINDS]
    return TargetAffinityScheduling(config, log, clusters)
