"""kfake target: the Go program starts, serves confluent-kafka, stops without leftovers.

Real kfake (franz-go, pinned in targets/kfake/go.mod), built into the cache on first use.
Every wait is bounded: a hung program fails the test, never the run.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from shutil import which
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kio.schema.errors import ErrorCode

from targets.kfake.build import FRANZ_GO_VERSION, KFAKE_VERSION, ensure_binary
from targets.kfake.provider import KfakeTarget
from targets.target import NotSupportedByTarget, TargetError
from targets.factory import create_target
from reference_impl.client.raw_client import parse_bootstrap
from reference_impl.protocol.api_keys import ApiKey
from targets.tests.netcheck import refused

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def _go_available() -> bool:
    return which("go") is not None or Path("/usr/local/go/bin/go").exists()


pytestmark = pytest.mark.skipif(not _go_available(), reason="the Go toolchain is needed to build kfake")


def _running(spec: str) -> Iterator[KfakeTarget]:
    target = create_target(spec)
    assert isinstance(target, KfakeTarget)
    target.start()
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture(scope="module")
def kfake3() -> Iterator[KfakeTarget]:
    yield from _running("kfake:nodes=3")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); /proc says whether it has exited.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def _wait_gone(pid: int, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_spec_parses_and_rejects_what_kfake_cannot_honour() -> None:
    assert create_target(f"kfake:{FRANZ_GO_VERSION}:nodes=2").spec.nodes == 2
    assert isinstance(create_target(f"kfake:{KFAKE_VERSION}"), KfakeTarget)
    for spec, message in (
        ("kfake:9.9", "unknown version '9.9'"),
        ("kfake:colour=blue", "unknown option(s) colour"),
        ("kfake:timeout=soon", "timeout must be a positive integer"),
        ("kfake:1.22.3:2", "unexpected '2'"),
    ):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            create_target(spec)


def test_capabilities_come_over_the_wire(kfake3: KfakeTarget) -> None:
    caps = kfake3.capabilities(refresh=True)
    assert caps.supports_api(ApiKey.API_VERSIONS, 3) and caps.supports_api(ApiKey.PRODUCE) and caps.supports_api(ApiKey.END_TXN)
    assert kfake3.node_ids == [0, 1, 2]
    assert len(parse_bootstrap(kfake3.bootstrap_servers)) == 3


def test_produce_consume_round_trip(kfake3: KfakeTarget) -> None:
    topic = f"kf-{uuid.uuid4().hex[:8]}"
    producer = Producer({**kfake3.client_config(), "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), key=b"k")
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({**kfake3.client_config(), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(5)]


def test_kill_and_restart_move_and_restore_a_node() -> None:
    target = create_target("kfake:nodes=2")
    target.start()
    try:
        (h0, p0), _ = parse_bootstrap(target.bootstrap_servers)
        target.kill_node(0)
        assert refused(h0, p0)
        with pytest.raises(NotSupportedByTarget, match="last running broker"):
            target.kill_node(1)
        target.restart_node(0)
        socket.create_connection((h0, p0), timeout=5).close()
        with target.cluster_client() as cc:
            cc.refresh()
            assert sorted(cc.nodes) == [0, 1]
        with pytest.raises(NotSupportedByTarget, match="pause"):
            target.pause_node(0)
    finally:
        target.stop()


def test_single_node_cannot_restart() -> None:
    target = create_target("kfake")
    target.start()
    try:
        with pytest.raises(NotSupportedByTarget):
            target.restart_node(0)
    finally:
        target.stop()


def test_stop_leaves_no_process_behind() -> None:
    target = create_target("kfake")
    target.start()
    pid = target._proc.pid  # noqa: SLF001 - the child is the thing under test
    (host, port), = parse_bootstrap(target.bootstrap_servers)
    target.stop()
    assert _wait_gone(pid, 15), f"kfake program {pid} survived stop()"
    assert refused(host, port)


def test_a_crashed_program_is_recorded_and_restarted_on_the_same_ports() -> None:
    target = create_target("kfake:nodes=2")
    target.start()
    try:
        before = target.bootstrap_servers
        old = target._proc  # noqa: SLF001 - the child is the thing under test
        old.send_signal(signal.SIGKILL)
        old.wait(WAIT_S)
        assert target.bootstrap_servers == before
        assert target._proc is not old and target._proc.poll() is None  # noqa: SLF001
        assert target.describe()["crashes"] == ["exit -9: no panic line"]
        with target.cluster_client() as cc:
            cc.refresh()
            assert sorted(cc.nodes) == [0, 1]
    finally:
        target.stop()


def test_program_dies_with_its_parent() -> None:
    """A parent killed by SIGKILL cannot clean up: the stdin pipe closing must end kfake."""
    binary = ensure_binary()
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import subprocess,sys;"
            f"p=subprocess.Popen([{str(binary)!r}],stdin=subprocess.PIPE,stdout=subprocess.PIPE,text=True);"
            "print(p.pid, p.stdout.readline().strip(), flush=True);"
            "import time; time.sleep(600)"
        )],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        ready, _, _ = select.select([parent.stdout], [], [], WAIT_S)
        assert ready, "kfake program did not report ready"
        pid_text, status = parent.stdout.readline().split(" ", 1)
        assert status.startswith("ready bootstrap=127.0.0.1:")
        parent.kill()
        parent.wait(WAIT_S)
        assert _wait_gone(int(pid_text)), "kfake program outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(WAIT_S)


def _target_up(spec: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "targets.target_up", spec], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_target_up_prints_bootstrap_first_and_stops_cleanly(tmp_path: Path) -> None:
    proc = _target_up("kfake:nodes=2", tmp_path)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], WAIT_S * 2)
        assert ready, "no output from target up"
        first = proc.stdout.readline().strip()
        assert first.startswith("bootstrap="), (first, proc.stderr.read() if proc.poll() is not None else "")
        brokers = parse_bootstrap(first.removeprefix("bootstrap="))
        assert len(brokers) == 2
        lines = []
        while not lines or not lines[-1].startswith("ready"):
            line = proc.stdout.readline()
            assert line, f"target up ended early: {lines}"
            lines.append(line.strip())
        assert "kind=kfake" in lines and "node_ids=0,1" in lines
        children = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        assert all(_wait_gone(pid, 15) for pid in children), f"left behind: {children}"
        assert all(refused(h, p) for h, p in brokers)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


@pytest.mark.parametrize("spec", ["kfake:9.9", "kfake:nodes=x", "kfake:bogus=1"])
def test_target_up_bad_spec_is_one_line_exit_2(spec: str, tmp_path: Path) -> None:
    proc = _target_up(spec, tmp_path)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("kipcheck target: error:"), err


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


# -- per-request faults: kfake's control hooks behind hold_requests / fail_requests ----------

HOLD_MS = 3000


@pytest.fixture(scope="module")
def kfake1() -> Iterator[KfakeTarget]:
    yield from _running("kfake")


def _txn_producer(target: KfakeTarget) -> Any:
    producer = Producer({**target.client_config(), "transactional.id": f"kf-tx-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(WAIT_S)
    return producer


def _open_txn(producer: Any) -> None:
    producer.begin_transaction()
    producer.produce(f"kf-hold-{uuid.uuid4().hex[:8]}", b"v")
    assert producer.flush(WAIT_S) == 0


def test_held_end_txn_delays_the_commit_by_the_hold(kfake1: KfakeTarget) -> None:
    """EndTxn held HOLD_MS on the coordinator: the commit takes at least that long and still
    commits (a slow coordinator, not a failed one); the hold applied to one request only."""
    producer = _txn_producer(kfake1)
    _open_txn(producer)
    kfake1.hold_requests(ApiKey.END_TXN, HOLD_MS, count=1)
    t0 = time.monotonic()
    producer.commit_transaction(WAIT_S)
    assert time.monotonic() - t0 >= HOLD_MS / 1000 * 0.95
    _open_txn(producer)
    producer.commit_transaction(WAIT_S)  # served without a hold: the count was one


def test_clear_releases_a_held_end_txn(kfake1: KfakeTarget) -> None:
    """An EndTxn held "until cleared" stays unanswered until clear_request_faults, then the
    commit completes: held requests are released, not dropped."""
    producer = _txn_producer(kfake1)
    _open_txn(producer)
    kfake1.hold_requests(ApiKey.END_TXN, 600_000, count=-1)
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            producer.commit_transaction(WAIT_S)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    worker = threading.Thread(target=commit, daemon=True)
    worker.start()
    worker.join(HOLD_MS / 1000)
    held = worker.is_alive()
    kfake1.clear_request_faults()
    worker.join(WAIT_S)
    assert held, "the commit finished while its EndTxn was held"
    assert not worker.is_alive() and not errors, errors


def test_failed_init_producer_id_answers_the_injected_error(kfake1: KfakeTarget) -> None:
    """fail_requests answers the next InitProducerId with the given error (here a fatal one
    the client surfaces as is); the following InitProducerId is served normally."""
    kfake1.fail_requests(ApiKey.INIT_PRODUCER_ID, ErrorCode.transactional_id_authorization_failed, count=1)
    with pytest.raises(KafkaException) as failed:
        _txn_producer(kfake1)
    assert failed.value.args[0].code() == int(ErrorCode.transactional_id_authorization_failed)
    _txn_producer(kfake1)


def test_fault_commands_refuse_bad_input(kfake1: KfakeTarget) -> None:
    with pytest.raises(ValueError, match="count must be"):
        kfake1.hold_requests(ApiKey.END_TXN, 10, count=0)
    with pytest.raises(ValueError, match="hold must be"):
        kfake1.hold_requests(ApiKey.END_TXN, -1)
    with pytest.raises(TargetError, match="unknown api key 9999"):
        kfake1._command("hold 9999 1 1")  # noqa: SLF001 - the program's own check
    with pytest.raises(TargetError, match="unknown error code 12345"):
        kfake1._command(f"fail {int(ApiKey.END_TXN)} 12345 1")  # noqa: SLF001
