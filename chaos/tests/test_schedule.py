"""chaos.schedule: fault names parse or are refused; the schedule is a pure function of
its seed, windows do not overlap and leave a quiet tail."""

import pytest

from chaos.nemesis.base import FaultSpec, FaultWindow
from chaos.schedule import aim_roles, parse_fault, parse_faults, schedule


def test_parse():
    assert parse_fault("kill") == FaultSpec("kill")
    assert parse_fault("kill:minority") == FaultSpec("kill", target="minority")
    assert parse_fault("kill:txn-coordinator") == FaultSpec("kill", target="role", role="txn-coordinator")
    assert parse_faults("none") == [] and parse_faults("") == []
    assert [s.name for s in parse_faults("kill, pause:leader")] == ["kill", "pause:leader"]
    for bad in ("kill:wat", ":x", "k!ll"):
        with pytest.raises(ValueError):
            parse_fault(bad)


def test_same_seed_same_schedule_and_shape():
    specs = [FaultSpec("kill"), FaultSpec("pause")]
    a = schedule(specs, 7, 60)
    assert a == schedule(specs, 7, 60) and a != schedule(specs, 8, 60)
    assert len(a) >= 3
    assert {w.spec.kind for w in a[:2]} == {"kill", "pause"}  # every fault once before repeats
    for w, nxt in zip(a, a[1:]):
        assert w.start_s < w.end_s <= nxt.start_s
    assert a[-1].end_s <= 60 - 10


def test_no_specs_or_no_room():
    assert schedule([], 1, 30) == []
    assert schedule([FaultSpec("kill")], 1, 1) == []
    with pytest.raises(ValueError):
        schedule([FaultSpec("kill")], 1, 0)


def test_role_faults_are_aimed_at_the_workloads_keys():
    """kill:txn-coordinator needs a transactional id: the run's own, unless the spec names one."""
    windows = schedule(parse_faults("kill:txn-coordinator,partition"), seed=1, time_limit_s=60)
    keys = {"transactional_id": "t-0", "topic": "in"}
    aimed = aim_roles(windows, keys)
    roles = [w for w in aimed if w.spec.target == "role"]
    assert roles and all(w.spec.param("transactional_id") == "t-0" and w.spec.param("topic") == "in" for w in roles)
    assert all(w.spec.params == () for w in aimed if w.spec.target != "role")
    mine = FaultSpec("kill", target="role", role="txn-coordinator", params=(("transactional_id", "mine"),))
    own = aim_roles([FaultWindow(mine, 1.0, 2.0)], keys)
    assert own[0].spec.param("transactional_id") == "mine"
