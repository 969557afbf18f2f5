"""The divergence register: where a KIP's text and Apache Kafka's behaviour disagree.

``registers/divergences.yaml``::

    divergences:
      - id: DIV-001
        requirement: KIP-447.FETCH.001          # a catalog id
        kip_text: what the KIP says
        apache_kafka:
          versions: ">=2.5.0"                   # version constraint the behaviour holds for
          behaviour: what real brokers do
        reference: kafka                        # the reference follows: kip | kafka | both
        evidence:
          test: conformance/suites/...::test_x  # nodeid or test name showing it
          observation: what the test observed

`load_register()` validates (id format and uniqueness, fields, requirement id format,
reference value, version constraint) and, given a catalog, that every requirement id
is catalogued. Problems raise `RegisterError` naming the entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from packaging.specifiers import InvalidSpecifier

from registers.catalog import Catalog, load_yaml, parse_constraint

DEFAULT_REGISTER = Path(__file__).resolve().parent / "divergences.yaml"
FOLLOWS = ("kip", "kafka", "both")
_DIV_ID = re.compile(r"^DIV-\d{3,}$")
_REQ_ID = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*\.[A-Z][A-Z0-9_]*\.\d{3}$")
_FIELDS = ("id", "requirement", "kip_text", "apache_kafka", "reference", "evidence")
_OPTIONAL = {"notes", "status"}


class RegisterError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid divergence register:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class Divergence:
    id: str
    requirement: str
    kip_text: str
    apache_kafka_versions: str
    apache_kafka_behaviour: str
    reference: str
    evidence_test: str
    evidence_observation: str
    notes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "requirement": self.requirement,
            "kip_text": self.kip_text,
            "apache_kafka": {"versions": self.apache_kafka_versions, "behaviour": self.apache_kafka_behaviour},
            "reference": self.reference,
            "evidence": {"test": self.evidence_test, "observation": self.evidence_observation},
            "notes": self.notes,
        }


class Register:
    def __init__(self, entries: list[Divergence], path: Path | None = None) -> None:
        self.entries = entries
        self.path = path

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, div_id: str) -> Divergence:
        for e in self.entries:
            if e.id == div_id:
                return e
        raise KeyError(f"unknown divergence id {div_id!r}")

    def for_requirement(self, rid: str) -> list[Divergence]:
        return [e for e in self.entries if e.requirement == rid]

    def unknown_requirements(self, catalog: Catalog) -> list[str]:
        return [f"{e.id}: requirement {e.requirement} is not in the catalog" for e in self.entries if e.requirement not in catalog]


def _text(problems: list[str], where: str, data: Any, key: str) -> str:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: {key} must be a non-empty string, got {value!r}")
        return ""
    return " ".join(value.split())


def parse_register(data: Any, name: str = "divergences.yaml", catalog: Catalog | None = None) -> Register:
    """Validate a parsed register; RegisterError lists every problem of every entry."""
    problems: list[str] = []
    if not isinstance(data, dict) or not isinstance(data.get("divergences"), list):
        raise RegisterError([f"{name}: top level must be a mapping with a 'divergences' list"])
    for key in sorted(set(data) - {"divergences"}):
        problems.append(f"{name}: unknown top-level field {key!r}")
    entries: list[Divergence] = []
    seen: set[str] = set()
    for index, item in enumerate(data["divergences"]):
        entry = _entry(problems, name, index, item, seen, catalog)
        if entry is not None:
            entries.append(entry)
    if problems:
        raise RegisterError(problems)
    return Register(entries)


def _entry(
    problems: list[str], name: str, index: int, item: Any, seen: set[str], catalog: Catalog | None
) -> Divergence | None:
    """One entry of the register, or None when it has a problem (appended)."""
    div_id = item.get("id") if isinstance(item, dict) else None
    where = f"{name}: {div_id}" if isinstance(div_id, str) else f"{name}: divergences[{index}]"
    if not isinstance(item, dict):
        problems.append(f"{where}: must be a mapping")
        return None
    n_before = len(problems)
    for key in _FIELDS:
        if key not in item:
            problems.append(f"{where}: missing field {key!r}")
    for key in sorted(set(item) - set(_FIELDS) - _OPTIONAL):
        problems.append(f"{where}: unknown field {key!r}")
    if not isinstance(div_id, str) or not _DIV_ID.match(div_id):
        problems.append(f"{where}: id must look like DIV-001, got {div_id!r}")
    elif div_id in seen:
        problems.append(f"{where}: duplicate id")
    else:
        seen.add(div_id)
    rid = item.get("requirement")
    if not isinstance(rid, str) or not _REQ_ID.match(rid):
        problems.append(f"{where}: requirement must be a catalog id like KIP-447.FETCH.001, got {rid!r}")
    elif catalog is not None and rid not in catalog:
        problems.append(f"{where}: requirement {rid} is not in the catalog")
    kip_text = _text(problems, where, item, "kip_text") if "kip_text" in item else ""
    versions, behaviour = _apache_kafka(problems, where, item)
    follows = item.get("reference")
    if "reference" in item and follows not in FOLLOWS:
        problems.append(f"{where}: reference must be one of {', '.join(FOLLOWS)}, got {follows!r}")
    ev_test, ev_obs = _evidence(problems, where, item)
    if len(problems) > n_before:
        return None
    return Divergence(
        id=div_id,
        requirement=rid,
        kip_text=kip_text,
        apache_kafka_versions=versions,
        apache_kafka_behaviour=behaviour,
        reference=follows,
        evidence_test=ev_test,
        evidence_observation=ev_obs,
        notes=item.get("notes"),
    )


def _apache_kafka(problems: list[str], where: str, item: Mapping[str, Any]) -> tuple[str, str]:
    """The entry's apache_kafka versions constraint and behaviour ("" when absent or bad)."""
    if "apache_kafka" not in item:
        return "", ""
    ak = item["apache_kafka"]
    if not isinstance(ak, dict):
        problems.append(f"{where}: apache_kafka must be a mapping with versions and behaviour")
        return "", ""
    behaviour = _text(problems, f"{where}: apache_kafka", ak, "behaviour")
    raw_versions = ak.get("versions")
    if raw_versions is False:
        raw_versions = "no"
    try:
        parse_constraint(raw_versions)
    except InvalidSpecifier as exc:
        problems.append(f"{where}: apache_kafka.versions must be a version constraint or 'no', got {raw_versions!r} ({exc})")
        return "", behaviour
    return str(raw_versions), behaviour


def _evidence(problems: list[str], where: str, item: Mapping[str, Any]) -> tuple[str, str]:
    """The entry's evidence test and observation ("" when absent or bad)."""
    if "evidence" not in item:
        return "", ""
    ev = item["evidence"]
    if not isinstance(ev, dict):
        problems.append(f"{where}: evidence must be a mapping with test and observation")
        return "", ""
    return _text(problems, f"{where}: evidence", ev, "test"), _text(problems, f"{where}: evidence", ev, "observation")


def load_register(path: Path | str | None = None, catalog: Catalog | None = None) -> Register:
    """Load and validate the register (default: the packaged divergences.yaml). With a
    catalog, every entry's requirement must be catalogued."""
    path = Path(path) if path is not None else DEFAULT_REGISTER
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RegisterError([f"{path.name}: not valid YAML: {exc}"]) from None
    register = parse_register(data, path.name, catalog)
    register.path = path
    return register


def match_recorded(register: Register, divergences: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], list[str]]]:
    """Pair recorded divergences (result-row entries) with register ids filed under the
    same requirement; an empty list means the divergence is not (yet) registered."""
    return [(d, [e.id for e in register.for_requirement(str(d.get("requirement")))]) for d in divergences]
