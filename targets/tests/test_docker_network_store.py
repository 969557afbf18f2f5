"""dockerd 20.10's reservePools panic on a broken network store: the engine starter moves
the store aside once and starts again (targets/docker_engine.py), and only for that panic."""

from __future__ import annotations

from targets import docker_engine

PANIC_START = (
    'time="t" level=info msg="Starting up"\n'
    'time="t" level=info msg="Loading containers: start."\n'
    "panic: runtime error: index out of range [0] with length 0\n"
    "github.com/docker/libnetwork.(*controller).reservePools(0x55e1dd7e5e70?)\n"
)


def _private_engine(tmp_path, monkeypatch, log: str):
    monkeypatch.setenv("KIPCHECK_DOCKER_ROOT", str(tmp_path))
    (docker_engine.state_dir() / "dockerd.log").write_text(log)
    store = tmp_path / "data" / "network" / "files" / "local-kv.db"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"broken")
    return store


def test_the_panicking_store_is_moved_aside(tmp_path, monkeypatch, capsys):
    store = _private_engine(tmp_path, monkeypatch, PANIC_START)
    assert docker_engine._set_aside_broken_network_store() is True
    assert not store.exists()
    assert [p.name.startswith("local-kv.db.broken-") for p in store.parent.iterdir()] == [True]
    assert "moved it to" in capsys.readouterr().err


def test_an_earlier_panic_followed_by_a_clean_start_moves_nothing(tmp_path, monkeypatch):
    store = _private_engine(tmp_path, monkeypatch, PANIC_START + 'time="t" level=info msg="Starting up"\nother failure\n')
    assert docker_engine._set_aside_broken_network_store() is False
    assert store.exists()
