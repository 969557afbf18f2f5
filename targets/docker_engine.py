"""A Docker engine for the `testcontainers` target: found, or installed and started by kipcheck.

`ensure_engine()` answers with the first engine that pings (`docker_engine()`: DOCKER_HOST,
~/.testcontainers.properties, the docker context, the default sockets). When none answers and the process is root, it installs Debian's `docker.io`
(apt-get, once) and starts `dockerd` itself. A daemon kipcheck started is watched by a
*guardian* process (`python -m targets.docker_engine guard`), in its own session so that a
SIGKILL of the test process does not take it along: every process using the engine registers
its pid in `users`; when none of them is alive any more the guardian removes the
kipcheck-labelled containers and networks, stops dockerd and unmounts what it left behind
(`/run/docker/netns/default`, see /work/shared/notes/containers-research.md). A daemon
kipcheck did not start is never stopped. Where no engine can be had (not root, apt fails)
DockerUnavailable says why, and tests skip with that reason.

The user count is a set of (pid, process start time) entries kept under `engine.lock`,
which every registration and the guardian's decision take: an engine another live kipcheck
process registered for is never stopped, a recycled pid does not count as a user, and a
registration is never dropped (the starter appends; only the guardian's stop clears it).
A kipcheck-started dockerd that answers slowly (a loaded machine) is waited for, never
replaced by a second one.

State: `$KIPCHECK_CACHE/docker/` (lock, users, dockerd.log, guardian.log, dockerd.pid).
`KIPCHECK_DOCKER_ROOT=DIR` runs a private engine instead (socket, data, exec root and state
under DIR; no bridge, no iptables): used by the tests of the guardian, harmless to a shared
engine.
"""

from __future__ import annotations

import fcntl
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from targets.kafka_native.jars import cache_root
from targets.target import NotSupportedByTarget

SOCKET = "/var/run/docker.sock"
LABEL_OWNER = "org.kipcheck.owner-pid"
LABEL_RUN = "org.kipcheck.run"
APT_LOCK_OPT = ["-o", "DPkg::Lock::Timeout=900"]
START_TIMEOUT_S = 60.0
GUARD_POLL_S = 1.0
ENGINE_PING_TIMEOUT_S = 3.0


class DockerUnavailable(NotSupportedByTarget):
    """No Docker engine answers; the reason names where it was looked for."""


# --- Docker engine detection ------------------------------------------------------------


def _testcontainers_properties_host() -> str | None:
    path = Path.home() / ".testcontainers.properties"
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "docker.host" and value.strip():
                return value.strip()
    except OSError:
        pass
    return None


def _docker_context_host() -> str | None:
    """The endpoint of the docker CLI's current context (needs no engine)."""
    try:
        out = subprocess.run(
            ["docker", "context", "inspect", "--format", "{{.Endpoints.docker.Host}}"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    host = out.stdout.strip()
    return host if out.returncode == 0 and host else None


def docker_host_candidates() -> list[tuple[str, str]]:
    """(url, where it came from), in the order testcontainers/docker-py would use them."""
    env = os.environ.get("DOCKER_HOST")
    if env:
        return [(env, "DOCKER_HOST")]
    props = _testcontainers_properties_host()
    if props:
        return [(props, "~/.testcontainers.properties docker.host")]
    out: list[tuple[str, str]] = []
    ctx = _docker_context_host()
    if ctx:
        out.append((ctx, "docker context"))
    defaults = ["/var/run/docker.sock"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        defaults.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "docker.sock"))
    defaults += [str(Path.home() / ".docker/run/docker.sock"), str(Path.home() / ".docker/desktop/docker.sock")]
    for path in defaults:
        url = f"unix://{path}"
        if all(url != u for u, _ in out) and (path == "/var/run/docker.sock" or os.path.exists(path)):
            out.append((url, "default socket"))
    return out


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _tls_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    cert_path = os.environ.get("DOCKER_CERT_PATH") or str(Path.home() / ".docker")
    ca, cert, key = (os.path.join(cert_path, n) for n in ("ca.pem", "cert.pem", "key.pem"))
    if os.path.exists(ca):
        ctx.load_verify_locations(ca)
    if os.path.exists(cert) and os.path.exists(key):
        ctx.load_cert_chain(cert, key)
    if os.environ.get("DOCKER_TLS_VERIFY", "") in ("", "0"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def ping_docker(url: str, timeout: float = ENGINE_PING_TIMEOUT_S) -> str:
    """GET /_ping on a Docker engine URL; returns the API version, raises OSError/ValueError."""
    parsed = urlparse(url)
    if parsed.scheme == "unix":
        conn: http.client.HTTPConnection = _UnixHTTPConnection(parsed.path, timeout)
    elif parsed.scheme in ("tcp", "http", "https"):
        host, port = parsed.hostname or "localhost", parsed.port or 2375
        tls = parsed.scheme == "https" or os.environ.get("DOCKER_TLS_VERIFY") not in (None, "", "0") or port == 2376
        conn = (
            http.client.HTTPSConnection(host, port, timeout=timeout, context=_tls_context())
            if tls
            else http.client.HTTPConnection(host, port, timeout=timeout)
        )
    else:
        raise ValueError(f"{parsed.scheme}:// Docker hosts are not checked by kipcheck")
    try:
        conn.request("GET", "/_ping")
        resp = conn.getresponse()
        body = resp.read(64)
        if resp.status != 200:
            raise OSError(f"GET /_ping answered HTTP {resp.status} {body!r}")
        return resp.getheader("Api-Version") or "unknown"
    finally:
        conn.close()


def docker_engine() -> tuple[str, str]:
    """(url, api_version) of the first Docker engine that answers; DockerUnavailable otherwise."""
    failures = []
    for url, source in docker_host_candidates():
        try:
            return url, ping_docker(url)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            failures.append(f"{url} ({source}): {reason}")
    raise DockerUnavailable("no Docker engine reachable: " + "; ".join(failures))


def docker_available() -> tuple[bool, str]:
    """(True, description) or (False, reason): for skip conditions."""
    try:
        url, api = docker_engine()
        return True, f"Docker engine at {url} (API {api})"
    except DockerUnavailable as exc:
        return False, exc.reason


# --- an engine kipcheck starts ------------------------------------------------------------


def private_root() -> Path | None:
    """KIPCHECK_DOCKER_ROOT: a private engine's directory, or None for the machine's engine."""
    env = os.environ.get("KIPCHECK_DOCKER_ROOT")
    return Path(env) if env else None


def data_root() -> Path:
    """dockerd's --data-root: the private engine's data directory, or the machine's."""
    root = private_root()
    return root / "data" if root else Path("/var/lib/docker")


def socket_path() -> str:
    root = private_root()
    return str(root / "docker.sock") if root else SOCKET


def state_dir() -> Path:
    root = private_root()
    d = root / "state" if root else cache_root() / "docker"
    d.mkdir(parents=True, exist_ok=True)
    return d


class _Lock:
    """An exclusive flock on a file of the state dir (parallel xdist workers, CI jobs)."""

    def __init__(self, name: str) -> None:
        self.path = state_dir() / name

    def __enter__(self) -> "_Lock":
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks (/proc/PID/stat field 22): with the pid, an
    identity a recycled pid does not share."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _ping() -> tuple[str, str] | None:
    try:
        if private_root():
            url = f"unix://{socket_path()}"
            return url, ping_docker(url)
        return docker_engine()
    except DockerUnavailable:
        return None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def ping_ok(url: str) -> bool:
    """Whether the engine at `url` answers GET /_ping."""
    try:
        ping_docker(url)
        return True
    except (OSError, ValueError, http.client.HTTPException):
        return False


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def install_packages(packages: list[str]) -> None:
    """apt-get install the missing ones (root only); one `apt-get update` per process."""
    if os.geteuid() != 0:
        raise DockerUnavailable(f"{', '.join(packages)} missing and not root: cannot apt-get install")
    if not shutil.which("apt-get"):
        raise DockerUnavailable(f"{', '.join(packages)} missing and no apt-get on this machine")
    if not getattr(install_packages, "updated", False):
        _run(["apt-get", *APT_LOCK_OPT, "update"], timeout=1200)
        install_packages.updated = True  # type: ignore[attr-defined]
    out = _run(["apt-get", *APT_LOCK_OPT, "install", "-y", "--no-install-recommends", *packages], timeout=1800)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise DockerUnavailable(f"apt-get install {' '.join(packages)} failed: {' | '.join(tail)}")


def _dockerd() -> str | None:
    return shutil.which("dockerd") or next((p for p in ("/usr/sbin/dockerd", "/usr/bin/dockerd") if os.path.exists(p)), None)


def _read_users() -> set[tuple[int, str]]:
    try:
        lines = (state_dir() / "users").read_text().splitlines()
    except OSError:
        return set()
    out = set()
    for line in lines:
        parts = line.split()
        if parts and parts[0].isdigit():
            out.add((int(parts[0]), parts[1] if len(parts) > 1 else ""))
    return out


def _is_live(pid: int, started: str) -> bool:
    return pid_alive(pid) and (not started or _start_time(pid) == started)


def register_user(pid: int | None = None) -> None:
    """Add a process to the engine's users (call under engine.lock); dead entries are pruned."""
    pid = pid or os.getpid()
    users = {u for u in _read_users() if _is_live(*u)}
    users.add((pid, _start_time(pid) or ""))
    tmp = state_dir() / "users.tmp"
    tmp.write_text("".join(f"{p} {t}\n" for p, t in sorted(users)))
    tmp.replace(state_dir() / "users")


def live_users() -> list[int]:
    """Registered pids that are still the processes that registered."""
    return sorted(p for p, t in _read_users() if _is_live(p, t))


def started_by_kipcheck() -> int | None:
    """The pid of a running dockerd kipcheck started (its pidfile), else None."""
    try:
        pid = int((state_dir() / "dockerd.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def ensure_engine() -> tuple[str, str]:
    """(url, api) of a running engine; starts one (and its guardian) when root and none answers.
    The caller is registered as a user of a kipcheck-started engine."""
    if private_root():
        os.environ["DOCKER_HOST"] = f"unix://{socket_path()}"  # docker CLI, docker-py
    # Ping and register under the guardian's lock: otherwise an engine the guardian is just
    # stopping (its last user gone, e.g. `kipcheck image build` before the tests) answers the
    # ping, the caller starts containers, and the guardian's clean-up removes them (seen in CI
    # as a container "not ready within 360s: connection refused").
    with _Lock("engine.lock"):
        host = os.environ.get("DOCKER_HOST")
        own = started_by_kipcheck() if host in (None, "", f"unix://{socket_path()}") else None
        found = _ping() or (_wait_ping(START_TIMEOUT_S) if own else None)
        if found:
            if own:
                register_user()
            return found
        if own:  # never start a second daemon next to a live one (its users would be lost)
            raise DockerUnavailable(f"dockerd {own} started by kipcheck does not answer within {START_TIMEOUT_S:.0f}s")
        if host and not private_root():
            raise DockerUnavailable(f"DOCKER_HOST={host} does not answer; kipcheck starts no engine there")
        if _dockerd() is None:
            install_packages(["docker.io"])
        if _dockerd() is None:
            raise DockerUnavailable("docker.io installed but no dockerd found")
        register_user()
        found = _start_and_wait() or (_start_and_wait() if _set_aside_broken_network_store() else None)
        if not found:
            log = (state_dir() / "dockerd.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise DockerUnavailable(f"dockerd did not answer within {START_TIMEOUT_S:.0f}s: {' | '.join(log)}")
        return found


def _start_and_wait() -> tuple[str, str] | None:
    """One daemon start: (url, api) once it answers, else None with the daemon stopped."""
    pid = _start_daemon()
    found = _wait_ping(START_TIMEOUT_S)
    if not found:
        stop_daemon(pid)
    return found


# dockerd 20.10 (Debian's docker.io) panics in libnetwork's reservePools on start when its
# network store holds a network whose IPAM pools were never written: seen here after a run
# was stopped while it created a cluster network, and then every later start panicked.
_NETWORK_STORE_PANIC = "libnetwork.(*controller).reservePools"


def _set_aside_broken_network_store() -> bool:
    """When the last start died of that panic, move the network store aside (dockerd makes a
    fresh one with its default networks; kipcheck's cluster networks are per run) and say so."""
    tail = (state_dir() / "dockerd.log").read_text(errors="replace")[-20000:]
    if _NETWORK_STORE_PANIC not in tail.rsplit("Starting up", 1)[-1]:
        return False
    store = data_root() / "network" / "files" / "local-kv.db"
    if not store.exists():
        return False
    aside = store.with_name(f"local-kv.db.broken-{int(time.time())}")
    store.rename(aside)
    print(f"kipcheck: dockerd panicked loading its network store; moved it to {aside} and starting again",
          file=sys.stderr)
    return True


def _wait_ping(timeout_s: float) -> tuple[str, str] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _ping()
        if found:
            return found
        time.sleep(0.2)
    return None


def _daemon_args() -> list[str]:
    root = private_root()
    args = ["--host", f"unix://{socket_path()}", "--pidfile", str(state_dir() / "dockerd-own.pid")]
    args += ["--data-root", str(data_root())]
    if root is None:
        return args
    return args + ["--exec-root", str(root / "exec"), "--bridge", "none", "--iptables=false", "--ip-masq=false"]


def _start_daemon() -> int:
    """dockerd (own pidfile/log) and its guardian, both in new sessions; returns dockerd's pid."""
    _unmount_leftovers()
    log = open(state_dir() / "dockerd.log", "ab")
    proc = subprocess.Popen(
        [_dockerd(), *_daemon_args()],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    (state_dir() / "dockerd.pid").write_text(f"{proc.pid}\n")
    guard_log = open(state_dir() / "guardian.log", "ab")
    subprocess.Popen(
        [sys.executable, "-m", "targets.docker_engine", "guard", str(proc.pid)],
        stdout=guard_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[1]),
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    return proc.pid


def _unmount_leftovers() -> None:
    root = private_root()
    exec_root = root / "exec" if root else Path("/run/docker")
    for mnt in (exec_root / "netns" / "default",):
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30, check=False)


def remove_labelled(only_dead_owners: bool) -> list[str]:
    """Remove kipcheck-labelled containers then networks; with only_dead_owners, those of dead pids."""
    removed = []
    for kind, ls in (("container", ["docker", "ps", "-a"]), ("network", ["docker", "network", "ls"])):
        out = _run([*ls, "--filter", f"label={LABEL_OWNER}", "--format", f'{{{{.ID}}}} {{{{.Label "{LABEL_OWNER}"}}}}'], 60)
        for line in out.stdout.split("\n"):
            parts = line.split()
            if len(parts) != 2:
                continue
            ident, owner = parts
            if only_dead_owners and owner.isdigit() and pid_alive(int(owner)):
                continue
            rm = ["docker", "rm", "-f", "-v", ident] if kind == "container" else ["docker", "network", "rm", ident]
            if _run(rm, 120).returncode == 0:
                removed.append(f"{kind} {ident}")
    return removed


def stop_daemon(pid: int | None = None) -> None:
    """Remove kipcheck's containers/networks, SIGTERM the kipcheck-started dockerd (`pid`, if
    given, only when it still is the one in the pidfile), clean up."""
    own = started_by_kipcheck()
    if own is None or (pid is not None and own != pid):
        return
    remove_labelled(only_dead_owners=False)
    os.kill(own, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while pid_alive(own) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(own):
        os.kill(own, signal.SIGKILL)
    _unmount_leftovers()
    for name in ("users", "dockerd.pid"):
        (state_dir() / name).unlink(missing_ok=True)


def guard(dockerd_pid: int) -> int:
    """Wait until no registered user is alive (or dockerd died), then stop what kipcheck
    started. The decision and every registration hold engine.lock, so a process that
    registered is never surprised by the stop."""
    grace_until = time.monotonic() + 10  # the starter registered before starting dockerd
    while pid_alive(dockerd_pid):
        with _Lock("engine.lock"):
            if started_by_kipcheck() != dockerd_pid:
                return 0  # not the kipcheck engine any more
            if not live_users() and time.monotonic() > grace_until:
                print(f"{time.strftime('%H:%M:%S')} no kipcheck user left: stopping dockerd {dockerd_pid}", flush=True)
                stop_daemon(dockerd_pid)
                return 0
        time.sleep(GUARD_POLL_S)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "guard":
        return guard(int(args[1]))
    if args == ["up"]:
        print(ensure_engine())
        return 0
    print("usage: python -m targets.docker_engine guard DOCKERD_PID | up", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
