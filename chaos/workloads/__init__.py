"""Chaos workloads: seeded clients that record an operation history through the client seam.

A workload has ``setup(target, recorder)`` (topics, input), ``run(stop)`` (client threads
until ``stop`` is set or the op budget is spent), ``catch_up()`` (final reads after the
last heal), ``teardown()`` (stop any child process it started, however the run ends) and
``check(history)`` (its checkers under its policy, from the history and the constructor's
arguments alone: ``kipcheck chaos --analyze`` rebuilds the workload from ``run.json``).
"""

from __future__ import annotations

from chaos.workloads.copier import CopierWorkload
from chaos.workloads.queue import QueueWorkload
from chaos.workloads.share import ShareWorkload

WORKLOADS = ("queue", "copier", "share")


def make_workload(name: str, seed: int, **options):
    """The workload called ``name`` (ValueError for an unknown one)."""
    if name == "queue":
        return QueueWorkload(seed, **options)
    if name == "copier":
        return CopierWorkload(seed, **options)
    if name == "share":
        return ShareWorkload(seed, **options)
    raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
