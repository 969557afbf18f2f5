"""franz-go's kfake as a target: a fourth, independent broker implementation (Go).

The Go program in this package (``main.go``, built by ``targets.kfake.build``) starts
``kfake.NewCluster`` on loopback ports and prints ``ready bootstrap=... node_ids=...``; it
then takes line commands on stdin (``kill``/``restart``/``topic``, and the per-request fault
injector ``hold``/``fail``/``clear`` built on kfake's ControlKey, SleepControl and Fault). Its stdin is a pipe this
process holds: when the provider (or the whole test run) goes away, the pipe closes and the
program closes its cluster and exits, so no broker outlives its run.

Cluster settings follow what the suites expect of Kafka (``auto.create.topics.enable=true``,
``num.partitions=1``); ``broker.<config>=value`` options reach kfake's ``BrokerConfigs``.
Capabilities come over the wire like every target's (ApiVersions and finalized features).
"""

from __future__ import annotations

import selectors
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from targets.kfake.build import FRANZ_GO_VERSION, KFAKE_VERSION, ensure_binary
from targets.target import NotSupportedByTarget, Target, TargetError, TargetSpec, wait_until_ready
from reference_impl.client.raw_client import parse_bootstrap
from reference_impl.protocol.api_keys import ApiKey

COUNT_OPTIONS = ("timeout", "partitions")
STOP_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 30.0


class KfakeTarget(Target):
    """kfake cluster in a child process; kill/restart map to kfake's RemoveNode/AddNode."""

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        _check_spec(spec)
        self.timeout = float(spec.option("timeout") or 60)
        self.partitions = int(spec.option("partitions") or 1)
        self._proc: subprocess.Popen[str] | None = None
        self._bootstrap: str | None = None
        self._node_ids: list[int] = []
        self._down: set[int] = set()
        self._lock = threading.Lock()
        self._run_dir: Path | None = None
        self._generation = 0
        self.crashes: list[str] = []

    @property
    def version(self) -> str:
        return f"kfake-{KFAKE_VERSION} (franz-go v{FRANZ_GO_VERSION})"

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise TargetError("kfake target is not started")
        self._respawn_if_crashed()
        return self._bootstrap

    def _respawn_if_crashed(self) -> None:
        """A kfake panic (one goroutine's nil dereference ends the process) is recorded and
        the cluster restarted, empty, on the same ports: the test that triggered it has
        already lost its connections and data and fails; later tests get a live cluster
        instead of "connection refused" for the rest of the run."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        panic = next((l for l in self._stderr_tail(4000).splitlines() if l.startswith(("panic:", "fatal error:"))), "")
        self.crashes.append(f"exit {proc.returncode}: {panic or 'no panic line'}")
        print(f"kipcheck: kfake crashed ({self.crashes[-1]}); restarted empty on the same ports; "
              f"stderr: {self._stderr_path()}", file=sys.stderr, flush=True)
        ports = ",".join(str(p) for _, p in parse_bootstrap(self._bootstrap or ""))
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()
        self._proc, self._down = None, set()
        self._spawn(["-ports", ports], time.monotonic() + self.timeout)

    @property
    def node_ids(self) -> list[int]:
        """kfake numbers its brokers from 0, Kafka-style configs from 1: report what it uses."""
        return list(self._node_ids) if self._node_ids else list(range(self.spec.nodes))

    def start(self) -> None:
        if self._proc is not None:
            return
        t0 = time.monotonic()
        try:
            self._spawn([], t0 + self.timeout)
            self._capabilities = wait_until_ready(self._bootstrap or "", max(1.0, t0 + self.timeout - time.monotonic()), "kfake")
        except Exception as exc:
            exited = self._proc.poll() if self._proc else None
            self.stop()
            if exited is not None:
                raise TargetError(f"kfake program exited ({exited}): {self._stderr_tail() or 'no stderr'}") from exc
            raise
        self.startup_seconds = time.monotonic() - t0

    def _spawn(self, extra: list[str], deadline: float) -> None:
        """Start the program (a fresh stderr file each time) and read its ready line."""
        binary = ensure_binary()
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="kipcheck-kfake-"))
        argv = [str(binary), "-nodes", str(self.spec.nodes), "-partitions", str(self.partitions), *extra]
        for key, value in self.spec.options:
            if key.startswith("broker."):
                argv += ["-broker-config", f"{key[len('broker.'):]}={value}"]
        self._generation += 1
        with open(self._stderr_path(), "w") as err:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1
            )
        self._read_ready(deadline)

    def _stderr_path(self) -> Path:
        assert self._run_dir is not None
        return self._run_dir / ("kfake.stderr" if self._generation <= 1 else f"kfake-{self._generation}.stderr")

    def _read_ready(self, deadline: float) -> None:
        """The program's first stdout line: `ready bootstrap=H:P,... node_ids=0,...`."""
        line = self._readline(deadline)
        fields = dict(f.partition("=")[::2] for f in line.split()[1:]) if line.startswith("ready ") else {}
        if not fields.get("bootstrap"):
            raise TargetError(f"kfake did not start: {line.strip() or self._stderr_tail() or 'no output'}")
        self._bootstrap = fields["bootstrap"]
        self._node_ids = [int(n) for n in fields.get("node_ids", "").split(",") if n]

    def _readline(self, deadline: float) -> str:
        """One stdout line of the program, or TargetError at the deadline (never hangs)."""
        assert self._proc is not None and self._proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            if not sel.select(max(0.0, deadline - time.monotonic())):
                raise TargetError("kfake program did not answer in time")
        return self._proc.stdout.readline()

    def _stderr_tail(self, limit: int = 500) -> str:
        path = self._stderr_path() if self._run_dir else None
        return path.read_text(errors="replace").strip()[-limit:] if path and path.exists() else ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        self._bootstrap, self._capabilities = None, None
        self._down.clear()
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()  # EOF: the program closes its cluster and exits
            proc.wait(timeout=STOP_TIMEOUT_S)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
        finally:
            if proc.stdout:
                proc.stdout.close()

    def log_paths(self) -> list[Path]:
        return sorted(self._run_dir.glob("kfake*.stderr")) if self._run_dir else []

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self._down:
            d["nodes_down"] = sorted(self._down)
        if self.crashes:
            d["crashes"] = list(self.crashes)
        return d

    # -- lifecycle -------------------------------------------------------------------------

    def _command(self, line: str) -> None:
        """Send one control command and wait for its `ok`/`err` answer."""
        with self._lock:
            if self._proc is None or self._proc.stdin is None:
                raise TargetError("kfake target is not started")
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
            answer = self._readline(time.monotonic() + COMMAND_TIMEOUT_S).strip()
        if answer != "ok":
            raise TargetError(f"kfake: {line!r} failed: {answer or 'program exited'}")

    def _check_node(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise ValueError(f"kfake has nodes {self.node_ids}, not {node_id}")

    def kill_node(self, node_id: int) -> None:
        """kfake RemoveNode (listener closed, partition leaders and coordinators move to the
        remaining brokers) plus closing the node's open connections. The cluster's data is
        shared in one process, so nothing is lost, unlike a SIGKILLed Kafka broker."""
        self._check_node(node_id)
        if len(self._node_ids) - len(self._down) <= 1:
            raise NotSupportedByTarget("kfake cannot kill its last running broker (RemoveNode refuses it)")
        self._command(f"kill {node_id}")
        self._down.add(node_id)

    def restart_node(self, node_id: int) -> None:
        """kfake AddNode with the old id and port (after RemoveNode if it was up)."""
        self._check_node(node_id)
        if node_id not in self._down:
            if len(self._node_ids) <= 1:
                raise NotSupportedByTarget("kfake cannot restart a single broker (RemoveNode refuses the last one)")
            self._command(f"kill {node_id}")
            self._down.add(node_id)
        self._command(f"restart {node_id}")
        self._down.discard(node_id)

    def pause_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("kfake cannot pause a node: its brokers are goroutines of one process")

    def resume_node(self, node_id: int) -> None:
        raise NotSupportedByTarget("kfake cannot resume a node (it cannot pause one)")

    def provision_topic(self, name: str, partitions: int) -> None:
        """kfake's own CreateTopic (it also serves CreateTopics over the wire)."""
        self._command(f"topic {name} {int(partitions)}")

    # -- per-request faults (kfake's control hooks) -----------------------------------------

    def hold_requests(self, api_key: ApiKey, ms: int, count: int = 1) -> None:
        """Hold the next `count` requests of `api_key` (-1: all until `clear_request_faults`)
        for `ms` each, then let kfake serve them: a slow coordinator or leader for one api,
        other connections unaffected (kfake ControlKey + SleepControl)."""
        if ms < 0:
            raise ValueError(f"hold must be >= 0 ms, got {ms}")
        self._command(f"hold {int(ApiKey(api_key))} {int(ms)} {_count(count)}")

    def fail_requests(self, api_key: ApiKey, error: ErrorCode, count: int = 1) -> None:
        """Answer the next `count` requests of `api_key` (-1: all until cleared) with `error`
        instead of serving them (kfake Fault: top-level error code where the response has one,
        else every entity's)."""
        self._command(f"fail {int(ApiKey(api_key))} {int(ErrorCode(error))} {_count(count)}")

    def clear_request_faults(self) -> None:
        """Drop every hold and fail; requests being held are released at once."""
        self._command("clear")


def _count(count: int) -> int:
    if count != -1 and count < 1:
        raise ValueError(f"count must be >= 1 or -1 (until cleared), got {count}")
    return int(count)


def _check_spec(spec: TargetSpec) -> None:
    """Reject values this target cannot honour before anything starts (the parser has
    checked the option names and the version: targets.target.KIND_OPTIONS)."""
    for name in COUNT_OPTIONS:
        raw = spec.option(name)
        if raw is not None and not (raw.isdigit() and int(raw) >= 1):
            raise ValueError(f"kfake: {name} must be a positive integer, got {raw!r}")


__all__ = ["KfakeTarget"]
