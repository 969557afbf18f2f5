"""Resolve the runtime jars of a Kafka release from Maven Central into a local cache.

Layout: ``$KIPCHECK_CACHE/kafka/<version>/libs/*.jar`` (``KIPCHECK_CACHE`` defaults to
``~/.cache/kipcheck``). Resolution runs Maven on ``pom.xml`` of this package:

    mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=...

into a temporary directory next to the final one, which is renamed into place only
when complete; an exclusive file lock (``kafka/<version>.lock``) keeps parallel
processes (pytest-xdist workers, CI jobs sharing a cache) from resolving twice.

Environment:
  KIPCHECK_CACHE        cache root (default ~/.cache/kipcheck)
  KIPCHECK_MVN          Maven executable (default: ``mvn`` on PATH)
  KIPCHECK_MAVEN_REPO   Maven local repository (-Dmaven.repo.local; default ~/.m2/repository)

Prefetch (CI): ``python -m targets.kafka_native.jars [VERSION...|--all|--default]``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from targets.kafka_native.versions import (
    DEFAULT_VERSION,
    KafkaRelease,
    resolve_release,
    supported_versions,
)
from targets.target import TargetError

POM = Path(__file__).with_name("pom.xml")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
LOCK_TIMEOUT_S = 1800.0


class JarResolutionError(TargetError):
    """Maven is missing or could not resolve a release's jars."""


def cache_root() -> Path:
    env = os.environ.get("KIPCHECK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kipcheck"


def release_dir(version: str) -> Path:
    return cache_root() / "kafka" / version


def libs_dir(version: str) -> Path:
    return release_dir(version) / "libs"


def core_jar_name(version: str) -> str:
    return f"kafka_2.13-{version}.jar"


def is_resolved(version: str) -> bool:
    return (libs_dir(version) / core_jar_name(version)).is_file()


def classpath(libs: Path) -> str:
    """A java -cp value for every jar of a libs dir (the JVM expands the wildcard)."""
    return str(libs / "*")


def find_mvn() -> str:
    env = os.environ.get("KIPCHECK_MVN")
    if env:
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        found = shutil.which(env)
        if found:
            return found
        raise JarResolutionError(f"KIPCHECK_MVN={env!r} is not an executable")
    found = shutil.which("mvn")
    if not found:
        raise JarResolutionError(
            "Maven (mvn) is not on PATH: it is needed once per Kafka version to fetch the broker "
            "jars from Maven Central. Install Maven 3.x, set KIPCHECK_MVN, or prefetch the jars "
            f"into {cache_root() / 'kafka'} (python -m targets.kafka_native.jars VERSION)."
        )
    return found


def mvn_command(mvn: str, release: KafkaRelease, pom: Path, out_dir: Path) -> list[str]:
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out_dir}",
    ]
    cmd += [f"-D{k}={v}" for k, v in sorted(release.maven_properties.items())]
    repo = os.environ.get("KIPCHECK_MAVEN_REPO")
    if repo:
        cmd.append(f"-Dmaven.repo.local={Path(repo).expanduser()}")
    return cmd


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class _FileLock:
    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._fd: int | None = None

    def __enter__(self) -> "_FileLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise JarResolutionError(f"timed out after {self.timeout_s:.0f}s waiting for lock {self.path}")
                time.sleep(0.5)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def ensure_jars(version: str | KafkaRelease | None = None, *, timeout_s: float = 1200.0) -> Path:
    """Return the libs dir of a release, resolving it with Maven first if needed."""
    release = version if isinstance(version, KafkaRelease) else resolve_release(version)
    v = release.version
    if is_resolved(v):
        return libs_dir(v)
    with _FileLock(cache_root() / "kafka" / f"{v}.lock", LOCK_TIMEOUT_S):
        if is_resolved(v):  # another process finished while we waited
            return libs_dir(v)
        _resolve(release, timeout_s)
    return libs_dir(v)


def _resolve(release: KafkaRelease, timeout_s: float) -> None:
    v = release.version
    mvn = find_mvn()
    final = release_dir(v)
    final.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".resolve-", dir=final))
    try:
        pom = work / "pom.xml"
        shutil.copyfile(POM, pom)
        out = work / "libs"
        cmd = mvn_command(mvn, release, pom, out)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            output = "".join(
                s.decode(errors="replace") if isinstance(s, bytes) else s for s in (exc.stdout, exc.stderr) if s
            )
            raise JarResolutionError(
                f"Maven did not resolve Kafka {v} within {timeout_s:.0f}s: {' '.join(cmd)}\n{_tail(output)}"
            ) from None
        elapsed = time.monotonic() - t0
        output = (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode != 0:
            raise JarResolutionError(
                f"Maven failed to resolve Kafka {v} (exit {proc.returncode}): {' '.join(cmd)}\n"
                f"--- mvn output (tail) ---\n{_tail(output)}"
            )
        jars = sorted(p.name for p in out.glob("*.jar")) if out.is_dir() else []
        missing = [j for j in (core_jar_name(v), f"kafka-clients-{v}.jar", f"kafka-raft-{v}.jar") if j not in jars]
        if missing:
            raise JarResolutionError(
                f"Maven finished but the Kafka {v} jars are incomplete (missing {', '.join(missing)}): "
                f"{' '.join(cmd)}\n{_tail(output)}"
            )
        libs = libs_dir(v)
        if libs.exists():  # a stale, incomplete dir from an older layout: replace it
            shutil.rmtree(libs)
        os.rename(out, libs)
        (final / "resolved.json").write_text(
            json.dumps(
                {
                    "version": v,
                    "maven_properties": release.maven_properties,
                    "jars": len(jars),
                    "resolve_seconds": round(elapsed, 2),
                    "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=2,
            )
            + "\n"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m targets.kafka_native.jars",
        description=f"Prefetch Kafka broker jars from Maven Central into {cache_root() / 'kafka'}.",
    )
    parser.add_argument("versions", nargs="*", metavar="VERSION", help="exact version or line (e.g. 4.2)")
    parser.add_argument("--all", action="store_true", help="every supported version: " + ", ".join(supported_versions()))
    parser.add_argument("--default", action="store_true", help=f"the default version ({DEFAULT_VERSION})")
    args = parser.parse_args(argv)
    wanted: list[str] = list(args.versions)
    if args.all:
        wanted += supported_versions()
    if args.default or not wanted:
        wanted.append(DEFAULT_VERSION)
    try:
        releases = list(dict.fromkeys(resolve_release(v).version for v in wanted))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status = 0
    for v in releases:
        cached = is_resolved(v)
        t0 = time.monotonic()
        try:
            path = ensure_jars(v)
        except JarResolutionError as exc:
            print(f"kafka {v}: FAILED\n{exc}", file=sys.stderr)
            status = 1
            continue
        how = "cached" if cached else f"resolved in {time.monotonic() - t0:.1f}s"
        print(f"kafka {v}: {path} ({len(list(path.glob('*.jar')))} jars, {how})", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
