"""`apache/kafka:VERSION` without a registry: pulled when Docker Hub answers, else built offline.

`ensure_image(version)` makes the tag present in the engine, cheapest first:
1. already in the engine;
2. `docker load` of a `docker save` archive in `$KIPCHECK_CACHE/images/` (CI reuses it);
3. `docker pull apache/kafka:VERSION` (tried once per machine with a short timeout; a
   failure is remembered in `images/registry-unreachable`, delete it to try again);
4. an offline build: a Debian root filesystem from `debootstrap --variant=minbase
   --include=openjdk-17-jre-headless bookworm` against the mirror apt uses, imported once as
   `kipcheck/bookworm-jre17` (`docker import`, no builder, no network), plus the release's
   jars from Maven Central (targets.kafka_native.jars) and the entry scripts of
   targets.kafka_image_files, committed under the upstream tag.
An offline-built image carries a recipe digest (org.kipcheck.recipe: scripts and logging
config); one of another recipe is rebuilt, so a cached image never runs outdated scripts.
An exclusive file lock per version keeps parallel xdist workers from building twice.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from targets import kafka_image_files
from targets.docker_engine import _Lock, install_packages
from targets.kafka_native.jars import cache_root, ensure_jars
from targets.kafka_native.versions import KafkaRelease, resolve_release
from targets.target import TargetError

REPOSITORY = "apache/kafka"
BASE_IMAGE = "kipcheck/bookworm-jre17:1"
PULL_TIMEOUT_S = 20.0
PACKAGE_DIR = Path(__file__).resolve().parent / "kafka_native"
IMAGE_LABEL = "org.kipcheck.image"
RECIPE_LABEL = "org.kipcheck.recipe"


class ImageBuildError(TargetError):
    """The image could be neither loaded, pulled nor built; the message says which step failed."""


def images_dir() -> Path:
    d = cache_root() / "images"
    d.mkdir(parents=True, exist_ok=True)
    return d


def image_tag(version: str) -> str:
    return f"{REPOSITORY}:{version}"


def _docker(args: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, **kw)


def _must(args: list[str], timeout: float, what: str, **kw) -> str:
    out = _docker(args, timeout, **kw)
    if out.returncode != 0:
        raise ImageBuildError(f"{what} failed: {(out.stderr or out.stdout).strip()[-800:]}")
    return out.stdout


def image_present(tag: str) -> bool:
    return _docker(["image", "inspect", "--format", "{{.Id}}", tag], 60).returncode == 0


def recipe(release: KafkaRelease) -> str:
    """A digest of what an offline build adds (scripts, logging config): an image built from
    another recipe is rebuilt, so a script fix reaches machines with a cached image."""
    h = hashlib.sha256((PACKAGE_DIR / release.logging_config_name).read_bytes())
    for rel, text in sorted(kafka_image_files.files(release.logging).items()):
        h.update(f"\0{rel}\0{text}".encode())
    return h.hexdigest()[:16]


def _label(tag: str, name: str) -> str:
    out = _docker(["image", "inspect", "--format", f'{{{{index .Config.Labels "{name}"}}}}', tag], 60)
    return out.stdout.strip() if out.returncode == 0 else ""


def _stale(tag: str, release: KafkaRelease) -> bool:
    """An offline-built image of another recipe (a pulled image is never stale)."""
    return _label(tag, IMAGE_LABEL) == "offline-build" and _label(tag, RECIPE_LABEL) != recipe(release)


def image_origin(tag: str) -> str:
    """'offline-build' for kipcheck's own image, 'registry' for a pulled one."""
    out = _docker(["image", "inspect", "--format", f'{{{{index .Config.Labels "{IMAGE_LABEL}"}}}}', tag], 60)
    return "offline-build" if out.stdout.strip() == "offline-build" else "registry"


def archive_path(tag: str) -> Path:
    return images_dir() / (re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) + ".tar")


def _load(tag: str) -> bool:
    path = archive_path(tag)
    if not path.is_file():
        return False
    out = _docker(["load", "-i", str(path)], 600)
    return out.returncode == 0 and image_present(tag)


def _save(tag: str) -> None:
    path = archive_path(tag)
    tmp = path.with_suffix(".tmp")
    _must(["save", "-o", str(tmp), tag], 600, f"docker save {tag}")
    tmp.replace(path)


def _pull(tag: str) -> bool:
    """One try per machine; Docker Hub unreachable is remembered (a 20 s cost only once)."""
    marker = images_dir() / "registry-unreachable"
    if marker.exists() or os.environ.get("KIPCHECK_IMAGE_OFFLINE") == "1":
        return False
    try:
        ok = _docker(["pull", tag], PULL_TIMEOUT_S).returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        marker.write_text(f"docker pull {tag} failed at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    return ok


def apt_mirror() -> str:
    """The Debian mirror apt uses (sources.list or deb822 .sources), for debootstrap."""
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if path.suffix in (".list", ".sources") or path.name == "sources.list":
            try:
                texts.append(path.read_text())
            except OSError:
                pass
    for text in texts:
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
            if "security" not in m.group(1) and not m.group(2).endswith("-security"):
                return m.group(1)
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
    return "http://deb.debian.org/debian"


def ensure_base_image() -> None:
    """kipcheck/bookworm-jre17: debootstrap'ed once, imported, saved to the cache."""
    with _Lock("base-image.lock"):
        if image_present(BASE_IMAGE) or _load(BASE_IMAGE):
            return
        if not shutil.which("debootstrap"):
            install_packages(["debootstrap"])
        root = Path(tempfile.mkdtemp(prefix="kipcheck-rootfs-", dir=images_dir()))
        try:
            out = subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=openjdk-17-jre-headless", "bookworm",
                 str(root), apt_mirror()],
                capture_output=True, text=True, timeout=1800, check=False,
            )
            if out.returncode != 0:
                raise ImageBuildError(f"debootstrap failed: {(out.stderr or out.stdout).strip()[-800:]}")
            tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            _must(["import", "--change", f"LABEL {IMAGE_LABEL}=offline-build", "-", BASE_IMAGE],
                  600, "docker import of the Debian root filesystem", stdin=tar.stdout)
            tar.wait(60)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        _save(BASE_IMAGE)


def _stage(release: KafkaRelease, dest: Path) -> None:
    """The files the image adds on top of the base: jars, logging config, entry scripts."""
    libs = ensure_jars(release)
    shutil.copytree(libs, dest / "opt/kafka/libs")
    (dest / "opt/kafka/config").mkdir(parents=True)
    shutil.copy(PACKAGE_DIR / release.logging_config_name, dest / "opt/kafka/config")
    (dest / "var/lib/kafka/data").mkdir(parents=True)
    for rel, text in kafka_image_files.files(release.logging).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)


def build_image(release: KafkaRelease) -> None:
    """Base image + staged files, committed as apache/kafka:VERSION (no builder, no network)."""
    ensure_base_image()
    tag = image_tag(release.version)
    with tempfile.TemporaryDirectory(prefix="kipcheck-image-", dir=images_dir()) as tmp:
        stage = Path(tmp)
        _stage(release, stage)
        cid = _must(["create", BASE_IMAGE, "true"], 120, "docker create").strip()
        try:
            _must(["cp", f"{stage}/.", f"{cid}:/"], 600, "docker cp of the Kafka files")
            changes = [
                "ENV PATH=/opt/kafka/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "WORKDIR /opt/kafka",
                "EXPOSE 9092",
                'ENTRYPOINT ["/etc/kafka/docker/run"]',
                'CMD []',
                f"LABEL {IMAGE_LABEL}=offline-build org.kipcheck.kafka-version={release.version} "
                f"{RECIPE_LABEL}={recipe(release)}",
            ]
            args = ["commit"]
            for change in changes:
                args += ["--change", change]
            _must([*args, cid, tag], 600, f"docker commit {tag}")
        finally:
            _docker(["rm", "-f", cid], 120)


def ensure_image(version: str | None = None, *, rebuild: bool = False) -> tuple[str, str]:
    """(tag, how it was had: present/loaded/pulled/built) for the release `version`."""
    release = resolve_release(version)
    tag = image_tag(release.version)
    with _Lock(f"image-{release.version}.lock"):
        if rebuild:
            _docker(["rmi", "-f", tag], 120)
            archive_path(tag).unlink(missing_ok=True)
        elif image_present(tag) and not _stale(tag, release):
            return tag, "present"
        elif not image_present(tag) and _load(tag) and not _stale(tag, release):
            return tag, "loaded"
        elif image_present(tag):  # a stale recipe: rebuilt, `docker commit` retags atomically
            rebuild = True
        if not rebuild and _pull(tag):
            _save(tag)
            return tag, "pulled"
        build_image(release)
        _save(tag)
        return tag, "built"


__all__ = ["ImageBuildError", "apt_mirror", "ensure_image", "image_origin", "image_tag"]
