"""The injector registry refuses unknown kinds; the recorder keeps one ordered history,
merges ops recorded elsewhere by time and closes what was left open as info."""

from types import SimpleNamespace

import pytest

from chaos.nemesis.base import Nemesis
from chaos.nemesis.registry import known_kinds, nemeses_for
from checkers.recorder import Recorder
from chaos.nemesis.container import ContainerNemesis
from chaos.nemesis.network import NetworkNemesis


def test_registry():
    assert "kill" in known_kinds()
    [n] = nemeses_for(object(), ["kill"], seed=1)
    assert isinstance(n, Nemesis) and "kill" in n.kinds
    with pytest.raises(ValueError, match="no injector"):
        nemeses_for(object(), ["kill", "teleport"])


def test_registry_routes_partition_by_target_kind():
    """Containerized targets cut brokers from each other; others cut clients at a proxy."""
    [container] = nemeses_for(SimpleNamespace(kind="testcontainers"), ["partition"])
    [network] = nemeses_for(SimpleNamespace(kind="kafka-native"), ["partition"])
    assert isinstance(container, ContainerNemesis) and isinstance(network, NetworkNemesis)
    assert "latency" in known_kinds(SimpleNamespace(kind="testcontainers"))


def test_recorder_merges_and_closes():
    rec = Recorder()
    inv = rec.invoke(0, "txn", [["send", "k-0", 1]])
    rec.pair("nemesis", "start-fault", {"fault": "kill"})
    rec.extend([{"time_ns": 0, "process": "copier-1", "type": "invoke", "f": "assign", "value": ["a-0"]},
                {"time_ns": 1, "process": "copier-1", "type": "ok", "f": "assign", "value": ["a-0"]}])
    rec.close_open("run ended")
    h = rec.history()
    assert [op.process for op in h][:2] == ["copier-1", "copier-1"]  # merged by time
    last = [op for op in h if op.process == 0][-1]
    assert last.type == "info" and last.error == "run ended" and inv["f"] == "txn"
