"""Register of known target deviations: a named target failing a named test.

The divergence register (divergences.py) records where a KIP's text and Apache Kafka
disagree. This register records where an implementation under test fails a
requirement in a way we have observed and explained (librdkafka's mock skipping CRC
checks, say). Each entry turns the matching test into a strict expected failure: the
verdict stays "fail" for that requirement and target in the report, CI stays green,
and when the target is fixed the strict xpass turns CI red until the entry is removed.
A flaky entry (a failure seen in some runs) is a non-strict xfail; with a signature it
excuses only the failure it describes, so another bug of the target in the same test
still fails it.

``registers/deviations/*.yaml`` (one file per suite; ids unique across files)::

    deviations:
      - id: DEV-001
        target: librdkafka-mock          # target kind
        versions: ">=4.0"                # optional version constraint on the target
        flaky: failed 1 of 2 runs        # optional, with the measured rate: a non-strict xfail
        signature: "CRC .* ignored"      # optional regex the failure must match (re.search on the
                                         #   exception's text); any other failure stays a failure
        test: test_corrupt_batch_rejected  # test function name, module.py::name, module.py::name[params],
                                           #   or module.py (every test of the module; needs a signature),
                                           #   or SUITE/TestName[/subtest] for a client suite's test
                                           #   (client_suites/; it covers the test's subtests)
        requirement: PROTO.BAD.001       # a client-suite entry may say CLIENT.<SUITE> (CLIENT.FRANZ-GO);
                                         #   `test: SUITE` alone (with a signature) covers all its tests
        observed: what the target does instead
        evidence: how it was established (test, command, observation)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from packaging.version import InvalidVersion, Version

from registers.catalog import Catalog, load_yaml, parse_constraint

DEFAULT_DEVIATIONS = Path(__file__).resolve().parent / "deviations"
_DEV_ID = re.compile(r"^DEV-\d{3,}$")
_FIELDS = ("id", "target", "test", "requirement", "observed", "evidence")
_OPTIONAL = {"versions", "flaky", "signature"}


class DeviationError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid deviation register:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class Deviation:
    id: str
    target: str
    test: str
    requirement: str
    observed: str
    evidence: str
    versions: str | None = None
    flaky: str | None = None  # measured failure rate; the xfail is then not strict
    signature: str | None = None  # regex of the one failure this entry excuses; others stay failures

    def matches(self, target_kind: str, target_version: str | None, nodeid: str, test_name: str) -> bool:
        if target_kind != self.target:
            return False
        if self.versions and target_version:
            try:
                if not parse_constraint(self.versions).contains(Version(target_version), prereleases=True):
                    return False
            except InvalidVersion:
                pass
        if self.test.endswith(".py"):  # a whole module
            return nodeid.split("::")[0].endswith(self.test)
        if self.test.endswith("]"):  # one parametrisation: "module.py::name[params]"
            return nodeid.endswith(self.test)
        if "::" in self.test:
            module, _, name = self.test.partition("::")
            return test_name == name and nodeid.split("::")[0].endswith(module)
        return test_name == self.test

    def excuses(self, exc: BaseException) -> bool:
        """Whether this entry covers a failure with this exception (its signature, if any,
        searched in the exception's text: for an assert, the message and the explanation)."""
        return self.excuses_text(str(exc))

    def excuses_text(self, text: str) -> bool:
        """The same for a failure known only as text (a client suite's output)."""
        return self.signature is None or re.search(self.signature, text) is not None

    def to_dict(self) -> dict[str, Any]:
        """The entry as report.json lists it (deviations.register[])."""
        return {
            "id": self.id,
            "target": self.target,
            "versions": self.versions,
            "test": self.test,
            "requirement": self.requirement,
            "observed": self.observed,
            "evidence": self.evidence,
            "flaky": self.flaky,
            "signature": self.signature,
        }

    @property
    def reason(self) -> str:
        rate = f" [flaky: {self.flaky}]" if self.flaky else ""
        return f"registered deviation {self.id} ({self.requirement}){rate}: {self.observed}"


def parse_deviations(data: Any, name: str = "deviations.yaml", catalog: Catalog | None = None) -> list[Deviation]:
    if not isinstance(data, dict) or not isinstance(data.get("deviations"), list):
        raise DeviationError([f"{name}: top level must be a mapping with a 'deviations' list"])
    problems: list[str] = []
    out: list[Deviation] = []
    seen: set[str] = set()
    for index, item in enumerate(data["deviations"]):
        where = f"{name}: deviations[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        where = f"{name}: {item.get('id', where)}"
        before = len(problems)
        problems += [f"{where}: missing field {k!r}" for k in _FIELDS if not item.get(k)]
        problems += [f"{where}: unknown field {k!r}" for k in sorted(set(item) - set(_FIELDS) - _OPTIONAL)]
        dev_id = item.get("id")
        if not isinstance(dev_id, str) or not _DEV_ID.match(dev_id):
            problems.append(f"{where}: id must look like DEV-001")
        elif dev_id in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(str(dev_id))
        if catalog is not None and item.get("requirement") not in catalog and not _client_suite_id(item):
            problems.append(f"{where}: requirement {item.get('requirement')} is not in the catalog")
        if item.get("versions"):
            try:
                parse_constraint(item["versions"])
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{where}: bad versions constraint: {exc}")
        if item.get("signature"):
            try:
                re.compile(str(item["signature"]))
            except re.error as exc:
                problems.append(f"{where}: bad signature regex: {exc}")
        elif str(item.get("test", "")).endswith(".py") or _whole_client_suite(item):
            problems.append(f"{where}: a whole-module or whole-suite entry needs a signature (the one failure it "
                            "excuses)")
        if len(problems) == before:
            out.append(
                Deviation(
                    id=dev_id,
                    target=item["target"],
                    test=item["test"],
                    requirement=item["requirement"],
                    observed=" ".join(str(item["observed"]).split()),
                    evidence=" ".join(str(item["evidence"]).split()),
                    versions=item.get("versions"),
                    flaky=" ".join(str(item["flaky"]).split()) if item.get("flaky") else None,
                    signature=str(item["signature"]) if item.get("signature") else None,
                )
            )
    if problems:
        raise DeviationError(problems)
    return out


def _client_suite_id(item: dict[str, Any]) -> bool:
    """A client-suite entry (`test: SUITE/TestName`) may name `CLIENT.<SUITE>` instead of a
    catalog id when the failure breaks no catalogued requirement (docs/clients.md)."""
    suite = str(item.get("test", "")).partition("/")[0]
    return bool(suite) and str(item.get("requirement")) == f"CLIENT.{suite.upper()}"


def _whole_client_suite(item: dict[str, Any]) -> bool:
    """`test: SUITE` with `requirement: CLIENT.<SUITE>`: an entry for every test of a client
    suite (one failure the target gives them all, e.g. an ApiVersions answer the client cannot read)."""
    return _client_suite_id(item) and "/" not in str(item.get("test", ""))


def load_deviations(path: Path | str | None = None, catalog: Catalog | None = None) -> list[Deviation]:
    """Load one register file, or every *.yaml file of a register directory."""
    path = Path(path) if path else DEFAULT_DEVIATIONS
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    entries: list[Deviation] = []
    for file in files:
        try:
            data = load_yaml(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise DeviationError([f"{file}: cannot read: {exc}"]) from exc
        entries += parse_deviations(data, file.name, catalog)
    dupes = sorted({d.id for d in entries if sum(e.id == d.id for e in entries) > 1})
    if dupes:
        raise DeviationError([f"{path}: duplicate ids across files: {', '.join(dupes)}"])
    return entries
