"""The requirement catalog: what each KIP (and the protocol foundations) requires.

Catalog files live in ``registers/catalog/*.yaml`` (shipped as package data). One
file describes one KIP (or ``PROTO``, the protocol foundations that are in no seed):

```yaml
kip: KIP-98
title: Exactly Once Delivery and Transactional Messaging
seed: 001_8fab8467a31efe1b.txt   # null when there is no seed (PROTO)
status: adopted                  # adopted | accepted | draft | voting | protocol
requirements:
  - id: KIP-98.IDEMP.001          # <KIP>.<AREA>.<NNN>
    section: "Idempotent producer > Sequence numbers"
    level: must                   # must | should | may
    behaviour: >- ...
    oracle: >- ...
    implemented_in:
      apache-kafka: ">=0.11.0"    # version constraint, or "no"
      reference: true             # true | planned
```

Requirements may carry the optional keys ``source`` (where the requirement comes from
when it is not a seed: protocol guide, Kafka's behaviour), ``notes``, ``tags`` and
``untested_reason`` (why no conformance test can observe it: a JMX metric, state only
the broker sees, a target-level setting; `kipcheck catalog --untested` lists such ids
as explained rather than missing, issue 14 item 2); any
further lower-case keys (``kafka_note``, ``conflict``...) are kept in ``extra``. A
misspelt required key still fails, as that key is then missing.
``implemented_in`` may carry further target kinds (``librdkafka-mock: true``).

`load_catalog()` validates everything and raises `CatalogError` listing every problem
with the file and requirement id it concerns. Seed file names are checked only when the
seeds folder exists (``../shared/seeds`` next to the repository, or
``$KIPCHECK_SEEDS_DIR``), so an installed package works without it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_CATALOG_DIR = PACKAGE_DIR / "catalog"

STATUSES = ("adopted", "accepted", "draft", "voting", "protocol")
LEVELS = ("must", "should", "may")
APACHE_KAFKA_KEY = "apache-kafka"
REFERENCE_KEY = "reference"

# Target kinds whose version is an Apache Kafka version (or an image carrying one).
KAFKA_VERSIONED_KINDS = ("kafka-native", "testcontainers")

_KIP_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*$")
_ID_RE = re.compile(r"^(?P<kip>[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)\.(?P<area>[A-Z][A-Z0-9_]*)\.(?P<num>\d{3})$")
_TOP_KEYS = {"kip", "title", "seed", "status", "requirements"}
_REQ_REQUIRED = ("id", "section", "level", "behaviour", "oracle", "implemented_in")
_REQ_OPTIONAL = {"source", "notes", "tags", "untested_reason"}
# A reason short enough to say nothing ("n/a", "JMX") is refused: it must name what
# makes the behaviour unobservable on the wire.
UNTESTED_REASON_MIN_CHARS = 20


class CatalogError(ValueError):
    """One or more catalog files are invalid; `.problems` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid requirement catalog:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class Requirement:
    id: str
    kip: str
    section: str
    level: str
    behaviour: str
    oracle: str
    implemented_in: Mapping[str, Any]
    file: str
    source: str | None = None
    notes: str | None = None
    tags: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    untested_reason: str | None = None

    @property
    def area(self) -> str:
        return self.id.split(".")[-2]

    @property
    def apache_kafka(self) -> str:
        """The Apache Kafka version constraint, or "no"."""
        return str(self.implemented_in.get(APACHE_KAFKA_KEY, "no"))

    @property
    def reference(self) -> bool | str:
        return self.implemented_in.get(REFERENCE_KEY, "planned")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kip": self.kip,
            "section": self.section,
            "level": self.level,
            "behaviour": self.behaviour,
            "oracle": self.oracle,
            "implemented_in": dict(self.implemented_in),
            "source": self.source,
            "untested_reason": self.untested_reason,
        }


@dataclass(frozen=True)
class KipDocument:
    kip: str
    title: str
    seed: str | None
    status: str
    file: str
    requirement_ids: tuple[str, ...]


@dataclass
class KipCoverage:
    """Requirement ids of one KIP split by whether some collected test claims them."""

    kip: str
    with_tests: list[str] = field(default_factory=list)
    without_tests: list[str] = field(default_factory=list)
    # untested id -> its catalogued `untested_reason` (a subset of without_tests)
    explained: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.with_tests) + len(self.without_tests)

    @property
    def unexplained(self) -> list[str]:
        """Untested ids with no written reason: what issue 14 counts as missing."""
        return [rid for rid in self.without_tests if rid not in self.explained]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kip": self.kip,
            "total": self.total,
            "with_tests": len(self.with_tests),
            "without_tests": len(self.without_tests),
            "tested_ids": list(self.with_tests),
            "untested_ids": list(self.without_tests),
        }


# -- versions ---------------------------------------------------------------------------

_LEADING_VERSION = re.compile(r"(\d+(?:\.\d+)*)")


def kafka_version_of(target_kind: str, version: str | None) -> Version | None:
    """The Apache Kafka version a target of this kind/version runs, when it can be told.

    kafka-native versions are Kafka versions; testcontainers versions are images
    (``apache/kafka:3.9.0``, ``confluentinc/cp-kafka:7.6.0`` -> Kafka 3.6.0).
    """
    if not version:
        return None
    text = version
    confluent = False
    if target_kind == "testcontainers" or "/" in text or ":" in text:
        image, _, tag = text.rpartition(":")
        if not image:  # no tag: "apache/kafka" means latest; unknown
            return None
        confluent = "cp-kafka" in image or "cp-server" in image or "confluent" in image
        text = tag
    m = _LEADING_VERSION.match(text.lstrip("v"))
    if not m:
        return None
    try:
        v = Version(m.group(1))
    except InvalidVersion:
        return None
    if confluent:
        # Confluent Platform X.Y ships Apache Kafka: 5.x -> 2.x, 6.0 -> 2.6, 7.y -> 3.y, 8.y -> 4.y
        major, minor = v.major, v.minor
        if major == 8:
            return Version(f"4.{minor}.0")
        if major == 7:
            return Version(f"3.{minor}.0")
        if major == 6:
            return Version(f"2.{minor + 6}.0")
        if major == 5:
            return Version(f"2.{minor}.0") if minor >= 0 else None
        return None
    return v


def parse_constraint(text: Any) -> SpecifierSet | None:
    """A version constraint (">=0.11.0", ">=2.5,<4.0"), or None for "no"."""
    if text is False or (isinstance(text, str) and text.strip().lower() == "no"):
        return None
    if not isinstance(text, str):
        raise InvalidSpecifier(f"{text!r} is not a version constraint")
    cleaned = ",".join(part.strip() for part in text.split(",") if part.strip())
    if not cleaned:
        raise InvalidSpecifier("empty version constraint")
    return SpecifierSet(cleaned)


def implemented_by(requirement: Requirement, target_kind: str, version: str | None) -> bool:
    """Does a target of this kind/version implement the requirement, per the catalog?

    reference: ``implemented_in.reference`` is true (planned -> False).
    kafka-native / testcontainers: the Kafka version satisfies ``apache-kafka``
    ("no" -> False); an unknown version is presumed to implement it.
    Other kinds (external, librdkafka-mock): their own ``implemented_in`` entry when
    present, else only "no" for Apache Kafka is taken as a no -- the test then decides
    from the target's advertised capabilities.
    """
    impl = requirement.implemented_in
    if target_kind == "reference":
        return impl.get(REFERENCE_KEY) is True
    if target_kind in impl and target_kind not in (APACHE_KAFKA_KEY, REFERENCE_KEY):
        value = impl[target_kind]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("no", "planned"):
            return False
        return True
    spec = parse_constraint(impl.get(APACHE_KAFKA_KEY, "no"))
    if spec is None:
        return False
    if target_kind in KAFKA_VERSIONED_KINDS:
        v = kafka_version_of(target_kind, version)
        if v is None:
            return True
        return spec.contains(v, prereleases=True)
    return True


# -- the catalog --------------------------------------------------------------------------


class Catalog:
    def __init__(self, kips: dict[str, KipDocument], requirements: dict[str, Requirement], directory: Path | None):
        self.kips = kips
        self.requirements = requirements
        self.directory = directory

    def __contains__(self, rid: object) -> bool:
        return rid in self.requirements

    def __iter__(self):
        return iter(self.requirements.values())

    def __len__(self) -> int:
        return len(self.requirements)

    def get(self, rid: str) -> Requirement:
        try:
            return self.requirements[rid]
        except KeyError:
            raise KeyError(f"unknown requirement id {rid!r}") from None

    def unknown(self, ids: Iterable[str]) -> list[str]:
        return [rid for rid in ids if rid not in self.requirements]

    def for_kip(self, kip: str) -> list[Requirement]:
        return [r for r in self.requirements.values() if r.kip == kip]

    def implemented_by(self, requirement: Requirement | str, target_kind: str, version: str | None) -> bool:
        if isinstance(requirement, str):
            requirement = self.get(requirement)
        return implemented_by(requirement, target_kind, version)

    def coverage(self, collected_requirement_ids: Iterable[str]) -> dict[str, KipCoverage]:
        """Per KIP: which catalogued ids some collected test claims, and which none does."""
        collected = set(collected_requirement_ids)
        out: dict[str, KipCoverage] = {}
        for kip in sorted(self.kips):
            out[kip] = KipCoverage(kip)
        for r in self.requirements.values():
            cov = out.setdefault(r.kip, KipCoverage(r.kip))
            (cov.with_tests if r.id in collected else cov.without_tests).append(r.id)
            if r.id not in collected and r.untested_reason:
                cov.explained[r.id] = r.untested_reason
        for cov in out.values():
            cov.with_tests.sort()
            cov.without_tests.sort()
        return out

    def kips_in_order(self) -> list[str]:
        return list(dict.fromkeys(r.kip for r in self.requirements.values()))


def default_seeds_dir() -> Path | None:
    env = os.environ.get("KIPCHECK_SEEDS_DIR")
    if env:
        return Path(env)
    candidate = PACKAGE_DIR.parent.parent / "shared" / "seeds"
    return candidate


def _str_field(problems: list[str], where: str, data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        problems.append(f"{where}: missing field {key!r}")
        return None
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
        return None
    return value.strip()


def _validate_implemented_in(problems: list[str], where: str, value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        problems.append(f"{where}: implemented_in must be a mapping, got {value!r}")
        return None
    out: dict[str, Any] = dict(value)
    if APACHE_KAFKA_KEY not in value:
        problems.append(f"{where}: implemented_in is missing {APACHE_KAFKA_KEY!r}")
    else:
        ak = value[APACHE_KAFKA_KEY]
        if ak is False:
            out[APACHE_KAFKA_KEY] = "no"
        else:
            try:
                parse_constraint(ak)
            except InvalidSpecifier as exc:
                problems.append(
                    f"{where}: implemented_in.{APACHE_KAFKA_KEY} must be a version constraint "
                    f"like '>=2.5' or 'no', got {ak!r} ({exc})"
                )
    if REFERENCE_KEY not in value:
        problems.append(f"{where}: implemented_in is missing {REFERENCE_KEY!r}")
    elif not (value[REFERENCE_KEY] is True or value[REFERENCE_KEY] == "planned"):
        problems.append(f"{where}: implemented_in.reference must be true or 'planned', got {value[REFERENCE_KEY]!r}")
    return out


# libyaml's loader when PyYAML has it: the same safe schema, ~10x faster than the pure
# Python one; the catalog is parsed in every pytest process (each xdist worker).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """yaml.safe_load, with libyaml when available."""
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader


def _load_file(
    path: Path,
    problems: list[str],
    seeds_dir: Path | None,
    seen: dict[str, str],
) -> tuple[KipDocument | None, list[Requirement]]:
    """One catalog file: its KIP document (None when kip or title is unusable) and its
    valid requirements; every problem found is appended to problems."""
    name = path.name
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        problems.append(f"{name}: not valid YAML: {exc}")
        return None, []
    if not isinstance(data, dict):
        problems.append(f"{name}: top level must be a mapping with kip, title, seed, status, requirements")
        return None, []
    kip, title, seed, status = _header(problems, name, data, seeds_dir)
    reqs_data = data.get("requirements")
    if not isinstance(reqs_data, list) or not reqs_data:
        problems.append(f"{name}: requirements must be a non-empty list")
        reqs_data = []
    requirements: list[Requirement] = []
    for index, item in enumerate(reqs_data):
        requirement = _requirement(problems, name, kip, index, item, seen)
        if requirement is not None:
            requirements.append(requirement)
    if kip is None or title is None:
        return None, requirements
    doc = KipDocument(kip, title, seed, status, name, tuple(r.id for r in requirements))
    return doc, requirements


def _header(
    problems: list[str], name: str, data: Mapping[str, Any], seeds_dir: Path | None
) -> tuple[str | None, str | None, str | None, Any]:
    """kip, title, seed and status of one catalog file (kip and title None when unusable)."""
    kip = _str_field(problems, name, data, "kip")
    if kip is not None and not _KIP_RE.match(kip):
        problems.append(f"{name}: kip {kip!r} must look like KIP-98 or PROTO")
        kip = None
    title = _str_field(problems, name, data, "title")
    if "seed" not in data:
        problems.append(f"{name}: missing field 'seed' (use null when there is no seed)")
    seed = data.get("seed")
    if seed is not None:
        if not isinstance(seed, str) or not seed.strip():
            problems.append(f"{name}: seed must be a file name or null, got {seed!r}")
            seed = None
        elif seeds_dir is not None and seeds_dir.is_dir() and not (seeds_dir / seed).is_file():
            problems.append(f"{name}: unknown seed file {seed!r} (not in {seeds_dir})")
    status = data.get("status")
    if status not in STATUSES:
        problems.append(f"{name}: status must be one of {', '.join(STATUSES)}, got {status!r}")
    return kip, title, seed, status


def _requirement(
    problems: list[str], name: str, kip: str | None, index: int, item: Any, seen: dict[str, str]
) -> Requirement | None:
    """One entry of a file's requirements list, or None when it has a problem (appended)."""
    rid = item.get("id") if isinstance(item, dict) else None
    where = f"{name}: {rid}" if isinstance(rid, str) else f"{name}: requirements[{index}]"
    if not isinstance(item, dict):
        problems.append(f"{where}: must be a mapping, got {item!r}")
        return None
    n_before = len(problems)
    for key in _REQ_REQUIRED:
        if key not in item or item[key] is None:
            problems.append(f"{where}: missing field {key!r}")
    extra = {k: v for k, v in item.items() if k not in _REQ_REQUIRED and k not in _REQ_OPTIONAL}
    for key in extra:
        if not isinstance(key, str) or not re.match(r"^[a-z][a-z0-9_-]*$", key):
            problems.append(f"{where}: bad field name {key!r}")
    if not isinstance(rid, str):
        if "id" in item:
            problems.append(f"{where}: id must be a string, got {rid!r}")
        return None
    _check_id(problems, where, name, kip, rid, seen)
    _check_texts(problems, where, item)
    impl = None
    if item.get("implemented_in") is not None:
        impl = _validate_implemented_in(problems, where, item["implemented_in"])
    _check_optional(problems, where, item)
    if len(problems) > n_before or kip is None or impl is None:
        return None
    source = item.get("source")
    reason = item.get("untested_reason")
    return Requirement(
        id=rid,
        kip=kip,
        section=item["section"].strip(),
        level=item.get("level"),
        behaviour=" ".join(item["behaviour"].split()),
        oracle=" ".join(item["oracle"].split()),
        implemented_in=impl,
        file=name,
        source=source.strip() if isinstance(source, str) else None,
        notes=item.get("notes"),
        tags=tuple(item.get("tags") or ()),
        extra=extra,
        untested_reason=" ".join(reason.split()) if isinstance(reason, str) else None,
    )


def _check_id(problems: list[str], where: str, name: str, kip: str | None, rid: str, seen: dict[str, str]) -> None:
    """The id's format, its KIP prefix, and that no earlier entry (of any file) took it."""
    m = _ID_RE.match(rid)
    if not m:
        problems.append(f"{where}: bad id format, expected <KIP>.<AREA>.<NNN> like KIP-98.IDEMP.001")
    elif kip is not None and m.group("kip") != kip:
        problems.append(f"{where}: id does not start with this file's kip {kip!r}")
    if rid in seen:
        problems.append(f"{where}: duplicate id (also in {seen[rid]})")
    else:
        seen[rid] = name


def _check_texts(problems: list[str], where: str, item: Mapping[str, Any]) -> None:
    """section, behaviour and oracle are non-empty strings; level is one of LEVELS."""
    for key in ("section", "behaviour", "oracle"):
        if key in item and item[key] is not None and (not isinstance(item[key], str) or not item[key].strip()):
            problems.append(f"{where}: field {key!r} must be a non-empty string")
    level = item.get("level")
    if "level" in item and level not in LEVELS:
        problems.append(f"{where}: level must be one of {', '.join(LEVELS)}, got {level!r}")


def _check_optional(problems: list[str], where: str, item: Mapping[str, Any]) -> None:
    """The optional source, tags and untested_reason, when present."""
    source = item.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        problems.append(f"{where}: source must be a non-empty string")
    tags = item.get("tags") or ()
    if not isinstance(tags, (list, tuple)) or not all(isinstance(t, str) for t in tags):
        problems.append(f"{where}: tags must be a list of strings")
    reason = item.get("untested_reason")
    if reason is not None and (
        not isinstance(reason, str) or len(" ".join(reason.split())) < UNTESTED_REASON_MIN_CHARS
    ):
        problems.append(
            f"{where}: untested_reason must say why no test can observe it "
            f"(at least {UNTESTED_REASON_MIN_CHARS} characters), got {reason!r}"
        )


def load_catalog(directory: Path | str | None = None, seeds_dir: Path | str | None = None) -> Catalog:
    """Load and validate every ``*.yaml`` in directory (default: the packaged catalog).

    seeds_dir: where seed files are checked; default `default_seeds_dir()`; checked only
    when that folder exists.
    """
    directory = Path(directory) if directory is not None else DEFAULT_CATALOG_DIR
    seeds = Path(seeds_dir) if seeds_dir is not None else default_seeds_dir()
    problems: list[str] = []
    if not directory.is_dir():
        raise CatalogError([f"{directory}: catalog directory does not exist"])
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise CatalogError([f"{directory}: no catalog files (*.yaml)"])
    kips: dict[str, KipDocument] = {}
    requirements: dict[str, Requirement] = {}
    seen: dict[str, str] = {}
    for path in files:
        doc, reqs = _load_file(path, problems, seeds, seen)
        if doc is not None:
            if doc.kip in kips:
                problems.append(f"{path.name}: kip {doc.kip} is already described by {kips[doc.kip].file}")
            else:
                kips[doc.kip] = doc
        for r in reqs:
            requirements[r.id] = r
    if problems:
        raise CatalogError(problems)
    return Catalog(kips, requirements, directory)


def read_unvalidated(directory: Path | str | None = None) -> list[tuple[Path, Any]]:
    """Each catalog file's YAML as (file, data), parsed but not validated: for showing a
    catalog `load_catalog` refuses (`kipcheck report` and `kipcheck catalog` read it after
    a warning). directory may be one file; a file that does not parse is left out."""
    path = Path(directory) if directory is not None else DEFAULT_CATALOG_DIR
    if not path.exists():
        return []
    files = (sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))) if path.is_dir() else [path]
    out: list[tuple[Path, Any]] = []
    for file in files:
        try:
            out.append((file, load_yaml(file.read_text(encoding="utf-8"))))
        except (OSError, ValueError, yaml.YAMLError):  # load_catalog names the problem
            continue
    return out


@lru_cache(maxsize=8)
def _cached(directory: str) -> Catalog:
    return load_catalog(directory)


def get_catalog(directory: Path | str | None = None) -> Catalog:
    """The validated catalog of directory (default: packaged), loaded once per process."""
    return _cached(str(Path(directory).resolve() if directory else DEFAULT_CATALOG_DIR))


def coverage(collected_requirement_ids: Iterable[str], catalog: Catalog | None = None) -> dict[str, KipCoverage]:
    return (catalog or get_catalog()).coverage(collected_requirement_ids)
