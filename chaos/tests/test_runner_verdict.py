"""chaos.runner.verdict and the pieces around it, without a target: a fault that did not
bite makes the run unknown, never valid; unseen writes are liveness, reported apart;
anomalies name catalog requirements; report.html is self-contained."""

import threading
import time

import pytest

from checkers.kafka_queue import ANOMALIES, check
from checkers.requirements import REQUIREMENTS
from checkers.result import compose
from checkers.history import HistoryBuilder, poll, send
from chaos.report import render
from chaos.runner import CouldNotRun, RunConfig, _wait_ready, run, verdict
from registers.catalog import get_catalog

GOOD_FAULT = {"fault": "kill", "nodes": [1], "effective": True, "evidence": "refused", "error": None}


def _clean():
    b = HistoryBuilder()
    b.ok(0, send("k", 1, offset=0))
    b.ok(1, poll({"k": [(0, 1)]}), f="poll")
    return b.build()


def test_effective_fault_clean_history_is_valid():
    assert verdict(compose({"q": check(_clean())}), [GOOD_FAULT], calm=False)["valid"] is True


def test_ineffective_or_unknown_fault_is_unknown_never_true():
    for eff in (False, None):
        v = verdict(compose({"q": check(_clean())}), [{**GOOD_FAULT, "effective": eff}], calm=False)
        assert v["valid"] == "unknown" and v["unknown_because"]


def test_chaos_run_without_any_fault_is_unknown_but_calm_run_is_valid():
    assert verdict(compose({"q": check(_clean())}), [], calm=False)["valid"] == "unknown"
    assert verdict(compose({"q": check(_clean())}), [], calm=True)["valid"] is True


def test_unseen_is_liveness_and_lost_write_is_safety_with_requirements():
    b = HistoryBuilder()
    b.ok(0, send("k", 1, offset=0))
    b.ok(0, send("k", 2, offset=1))
    b.ok(1, poll({"k": [(0, 1)]}), f="poll")
    v = verdict(compose({"q": check(b.build())}), [GOOD_FAULT], calm=False)
    assert v["valid"] == "unknown" and not v["anomalies"]
    assert [a["type"] for a in v["liveness"]] == ["unseen"]
    b.ok(1, poll({"k": [(2, 3)]}), f="poll")  # a read past offset 1: the unseen write is lost
    b.ok(2, send("k", 3, offset=2))
    v = verdict(compose({"q": check(b.build())}), [GOOD_FAULT], calm=False)
    assert v["valid"] is False
    lost = next(a for a in v["anomalies"] if a["type"] == "lost-write")
    assert "KIP-98.TXN.001" in lost["requirements"]


def test_every_requirement_id_is_in_the_catalog():
    catalog = get_catalog()
    missing = {t: r for t, reqs in REQUIREMENTS.items() for r in reqs if r not in catalog}
    assert not missing
    assert set(ANOMALIES) <= set(REQUIREMENTS)


def test_report_is_self_contained_svg():
    h = _clean()
    res = verdict(compose({"q": check(h)}), [GOOD_FAULT], calm=False)
    page = render(h, {**res["checkers"], **res}, [GOOD_FAULT], {"seed": 1})
    assert page.count("<svg") == 2 and "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_a_fault_the_target_cannot_inject_ends_the_run_as_could_not_run(tmp_path):
    """pause on the reference (its nodes share one ticker): exit 2, never an "unknown" run."""
    cfg = RunConfig(target="reference:nodes=3", workload="queue", faults="pause", seed=1, time_limit_s=20,
                    out=tmp_path, workload_options={"max_ops": 100_000})
    with pytest.raises(CouldNotRun, match="not supported by target: pause: reference cannot pause"):
        run(cfg, log=lambda _m: None)


def test_the_schedule_waits_for_the_workload_to_be_ready_but_not_forever():
    class Workload:
        def __init__(self, after_s):
            self.t0, self.after_s = time.monotonic(), after_s

        def ready(self):
            return time.monotonic() - self.t0 >= self.after_s

    alive = threading.Thread(target=time.sleep, args=(30,), daemon=True)
    alive.start()
    assert 0.3 <= _wait_ready(Workload(0.3), alive, 20.0) < 15.0
    assert 0.5 <= _wait_ready(Workload(1e9), alive, 0.5) < 15.0  # never ready: bounded
    assert _wait_ready(object(), alive, 20.0) < 1.0  # no ready(): at once
