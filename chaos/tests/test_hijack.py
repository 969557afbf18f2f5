"""The ``hijack`` fault on a live reference: a second producer initialises the copier's
transactional id; the InitProducerId bumps the epoch (effective), and the fencing rule
judges the zombie's operations recorded after it."""

from __future__ import annotations

import pytest

from checkers.history import HistoryBuilder, send
from chaos.nemesis.base import FaultSpec
from chaos.nemesis.hijack import HijackNemesis, describe_producer, hijack_process, hijackers_of
from checkers.recorder import Recorder
from chaos.workloads.copier import _in_init_order
from targets.factory import create_target
from reference_impl.client.transactional_producer import TransactionalProducer
from checkers.fencing import fenced_ok_cases
from targets.target import NotSupportedByTarget


class _Workload:
    def __init__(self, tid: str) -> None:
        self.tid = tid

    def transactional_ids(self) -> list[str]:
        return [self.tid]


def test_hijack_bumps_the_epoch_and_fences_the_zombie():
    target = create_target("reference")
    target.start()
    try:
        tid = "hijack-me"
        zombie = TransactionalProducer(target.bootstrap_servers, tid, request_timeout_ms=10_000)
        zombie.init_transactions()
        rec = Recorder()
        nem = HijackNemesis(seed=1)
        nem.setup(target)
        nem.bind(_Workload(tid), rec)
        record = nem.heal(nem.invoke(FaultSpec("hijack")))
        assert record.effective is True, record.evidence
        assert tuple(record.details["after"]) > tuple(record.details["before"])
        assert describe_producer(nem.admin_bootstrap(), tid) == tuple(record.details["after"])
        ops = rec.history().to_list()
        assert [(o["process"], o["type"]) for o in ops] == [(hijack_process(tid, 1), "invoke"), (hijack_process(tid, 1), "ok")]
        zombie.close()
    finally:
        target.stop()


def test_no_transactional_workload_means_the_fault_cannot_run():
    nem = HijackNemesis()
    nem.bind(object(), Recorder())
    with pytest.raises(NotSupportedByTarget):
        nem.invoke(FaultSpec("hijack"))


def test_zombie_ok_after_the_hijack_is_fenced_ok():
    b = HistoryBuilder()
    b.ok("copier-1", send("b-0", "x", offset=0))
    b.ok(hijack_process("t", 1))                     # the hijacker initialised "t"
    b.ok("copier-1", send("b-0", "y", offset=1))    # the zombie still committed
    b.ok("copier-2", send("b-0", "z", offset=2))    # the next copier fences the hijacker: fine
    h = b.build()
    order = _in_init_order(h, ["copier-1", "copier-2"] + hijackers_of(h, "t"))
    assert order == ["copier-1", hijack_process("t", 1), "copier-2"]
    errs = fenced_ok_cases(h, {"t": order})
    assert [(e["process"], e["fenced-by"]) for e in errs] == [("copier-1", hijack_process("t", 1))]
