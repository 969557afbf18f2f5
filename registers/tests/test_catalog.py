"""Requirement catalog and divergence register: loading, validation, queries."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from registers import catalog as cat
from registers.catalog import CatalogError, implemented_by, kafka_version_of, load_catalog
from registers.divergences import RegisterError, load_register, match_recorded, parse_register

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "conformance" / "suites"

GOOD = """\
kip: KIP-98
title: Exactly Once Delivery and Transactional Messaging
seed: 001_seed.txt
status: adopted
requirements:
  - id: KIP-98.IDEMP.001
    section: "Idempotent producer > Sequence numbers"
    level: must
    behaviour: >-
      The broker rejects an out-of-order
      sequence number.
    oracle: >-
      Produce seq 0 then seq 2; the second answers OUT_OF_ORDER_SEQUENCE_NUMBER.
    implemented_in:
      apache-kafka: ">=0.11.0"
      reference: true
    kafka_note: extra keys are kept
  - id: KIP-98.TXN.001
    section: "Transactions"
    level: should
    behaviour: b
    oracle: o
    implemented_in:
      apache-kafka: no
      reference: planned
"""


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def seeds(tmp_path: Path) -> Path:
    d = tmp_path / "seeds"
    d.mkdir()
    (d / "001_seed.txt").write_text("seed text")
    return d


def load_bad(tmp_path: Path, seeds: Path, text: str, name: str = "kip-98.yaml") -> list[str]:
    d = tmp_path / "cat"
    write(d, name, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(d, seeds_dir=seeds)
    return info.value.problems


# -- the real catalog --------------------------------------------------------------------


def test_packaged_catalog_loads_and_validates():
    catalog = load_catalog()
    assert "PROTO" in catalog.kips
    assert len(catalog) >= 15


def test_protocol_catalog_has_foundation_requirements_with_sources():
    proto = load_catalog().for_kip("PROTO")
    assert 15 <= len(proto) <= 25
    areas = {r.area for r in proto}
    assert {"APIVER", "META", "PRODUCE", "FETCH", "LISTOFF", "GROUP", "BAD"} <= areas
    for r in proto:
        assert r.source, f"{r.id} does not say where it comes from"
        assert r.implemented_in["reference"] is True


def _suite_requirement_ids(suites: Path = SUITES, root: Path = REPO) -> dict[str, list[str]]:
    """requirement ids used in @pytest.mark.requirement(...) in conformance/suites."""
    found: dict[str, list[str]] = {}
    for path in sorted(suites.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "requirement"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "mark"
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        found.setdefault(arg.value, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_suite_requirement_ids_are_catalogued():
    catalog = load_catalog()
    used = _suite_requirement_ids()
    unknown = {rid: where for rid, where in used.items() if rid not in catalog}
    assert not unknown, f"requirement ids used in suites but not in the catalog: {unknown}"


def test_suite_scanner_finds_marker_ids(tmp_path):
    # guard for the test above: the AST scan really sees marker arguments
    d = tmp_path / "suites"
    write(d, "test_x.py", 'import pytest\n@pytest.mark.requirement("A.B.001", "A.B.002")\ndef test_x(): pass\n')
    write(d / "sub", "test_y.py", 'import pytest\npytestmark = pytest.mark.requirement("A.C.001")\n')
    assert set(_suite_requirement_ids(d, tmp_path)) == {"A.B.001", "A.B.002", "A.C.001"}


def test_divergence_register_references_catalogued_ids():
    register = load_register(catalog=load_catalog())
    assert register.get("DIV-001").requirement == "KIP-447.FETCH.001"


# -- loading good files ------------------------------------------------------------------


def test_good_file_loads_into_dataclasses(tmp_path, seeds):
    d = tmp_path / "cat"
    write(d, "kip-98.yaml", GOOD)
    catalog = load_catalog(d, seeds_dir=seeds)
    r = catalog.get("KIP-98.IDEMP.001")
    assert r.kip == "KIP-98" and r.area == "IDEMP" and r.level == "must"
    assert r.behaviour == "The broker rejects an out-of-order sequence number."
    assert r.file == "kip-98.yaml"
    assert r.extra == {"kafka_note": "extra keys are kept"}
    assert catalog.get("KIP-98.TXN.001").apache_kafka == "no"  # YAML `no` is False -> "no"
    doc = catalog.kips["KIP-98"]
    assert doc.seed == "001_seed.txt" and doc.status == "adopted"
    assert doc.requirement_ids == ("KIP-98.IDEMP.001", "KIP-98.TXN.001")
    assert "KIP-98.IDEMP.001" in catalog and "KIP-98.NOPE.001" not in catalog
    with pytest.raises(KeyError, match="KIP-98.NOPE.001"):
        catalog.get("KIP-98.NOPE.001")


def test_seed_not_checked_when_seeds_folder_is_absent(tmp_path):
    d = tmp_path / "cat"
    write(d, "kip-98.yaml", GOOD.replace("001_seed.txt", "999_missing.txt"))
    catalog = load_catalog(d, seeds_dir=tmp_path / "no-such-folder")
    assert catalog.kips["KIP-98"].seed == "999_missing.txt"


# -- validation errors name file and id -------------------------------------------------------


def test_unknown_seed_file_is_an_error(tmp_path, seeds):
    problems = load_bad(tmp_path, seeds, GOOD.replace("001_seed.txt", "999_missing.txt"))
    assert problems == [f"kip-98.yaml: unknown seed file '999_missing.txt' (not in {seeds})"]


def test_duplicate_id_in_one_file(tmp_path, seeds):
    problems = load_bad(tmp_path, seeds, GOOD.replace("KIP-98.TXN.001", "KIP-98.IDEMP.001"))
    assert problems == ["kip-98.yaml: KIP-98.IDEMP.001: duplicate id (also in kip-98.yaml)"]


def test_duplicate_id_across_files(tmp_path, seeds):
    d = tmp_path / "cat"
    write(d, "a.yaml", GOOD)
    write(d, "b.yaml", GOOD.replace("KIP-98\n", "KIP-98\n", 1).replace("KIP-98.TXN.001", "KIP-98.TXN.002"))
    with pytest.raises(CatalogError) as info:
        load_catalog(d, seeds_dir=seeds)
    assert "b.yaml: KIP-98.IDEMP.001: duplicate id (also in a.yaml)" in info.value.problems
    assert "b.yaml: kip KIP-98 is already described by a.yaml" in info.value.problems


@pytest.mark.parametrize("bad_id", ["KIP-98.IDEMP.1", "KIP-98.idemp.001", "KIP-98-IDEMP-001", "IDEMP.001"])
def test_bad_id_format(tmp_path, seeds, bad_id):
    problems = load_bad(tmp_path, seeds, GOOD.replace("KIP-98.IDEMP.001", bad_id))
    assert problems == [f"kip-98.yaml: {bad_id}: bad id format, expected <KIP>.<AREA>.<NNN> like KIP-98.IDEMP.001"]


def test_id_of_another_kip(tmp_path, seeds):
    problems = load_bad(tmp_path, seeds, GOOD.replace("KIP-98.IDEMP.001", "KIP-447.IDEMP.001"))
    assert problems == ["kip-98.yaml: KIP-447.IDEMP.001: id does not start with this file's kip 'KIP-98'"]


@pytest.mark.parametrize("field", ["section", "level", "behaviour", "oracle", "implemented_in"])
def test_missing_requirement_field(tmp_path, seeds, field):
    lines = GOOD.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{field}:"))
    # drop the field line and its indented continuation lines
    end = start + 1
    while end < len(lines) and lines[end].startswith("      "):
        end += 1
    problems = load_bad(tmp_path, seeds, "".join(lines[:start] + lines[end:]))
    assert f"kip-98.yaml: KIP-98.IDEMP.001: missing field {field!r}" in problems


@pytest.mark.parametrize("field", ["kip", "title", "status"])
def test_missing_top_level_field(tmp_path, seeds, field):
    text = "".join(line for line in GOOD.splitlines(keepends=True) if not line.startswith(f"{field}:"))
    problems = load_bad(tmp_path, seeds, text)
    assert any(p.startswith("kip-98.yaml: ") and field in p for p in problems), problems


def test_missing_id(tmp_path, seeds):
    problems = load_bad(tmp_path, seeds, GOOD.replace("  - id: KIP-98.TXN.001\n    section", "  - section"))
    assert problems == ["kip-98.yaml: requirements[1]: missing field 'id'"]


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("level: must", "level: required", "KIP-98.IDEMP.001: level must be one of must, should, may, got 'required'"),
        ('apache-kafka: ">=0.11.0"', 'apache-kafka: "since 0.11"', "KIP-98.IDEMP.001: implemented_in.apache-kafka must be a version constraint"),
        ("reference: true", "reference: maybe", "KIP-98.IDEMP.001: implemented_in.reference must be true or 'planned', got 'maybe'"),
        ("reference: true", "reference: 1", "KIP-98.IDEMP.001: implemented_in.reference must be true or 'planned', got 1"),
        ("status: adopted", "status: shipped", "kip-98.yaml: status must be one of"),
        ("kip: KIP-98", "kip: kip 98", "kip-98.yaml: kip 'kip 98' must look like KIP-98 or PROTO"),
    ],
)
def test_bad_values(tmp_path, seeds, old, new, expected):
    assert old in GOOD
    problems = load_bad(tmp_path, seeds, GOOD.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


def test_invalid_yaml_and_empty_requirements(tmp_path, seeds):
    problems = load_bad(tmp_path, seeds, "kip: [unclosed\n")
    assert problems[0].startswith("kip-98.yaml: not valid YAML")
    problems = load_bad(tmp_path, seeds, GOOD.split("requirements:")[0] + "requirements: []\n")
    assert problems == ["kip-98.yaml: requirements must be a non-empty list"]


def test_all_problems_are_reported_together(tmp_path, seeds):
    text = GOOD.replace("level: must", "level: nope").replace("KIP-98.TXN.001", "KIP-98.TXN.1")
    problems = load_bad(tmp_path, seeds, text)
    assert len(problems) == 2
    assert "invalid requirement catalog" in str(CatalogError(problems))


# -- implemented_by, versions, coverage ----------------------------------------------------------


def req(apache_kafka: object = ">=2.5.0", reference: object = True, **extra: object) -> cat.Requirement:
    impl = {"apache-kafka": apache_kafka, "reference": reference, **extra}
    return cat.Requirement("KIP-447.FETCH.001", "KIP-447", "s", "must", "b", "o", impl, "f.yaml")


@pytest.mark.parametrize(
    "requirement,kind,version,expected",
    [
        (req(reference=True), "reference", None, True),
        (req(reference="planned"), "reference", None, False),
        (req(">=2.5.0"), "kafka-native", "2.5.0", True),
        (req(">=2.5.0"), "kafka-native", "2.4.1", False),
        (req(">=2.5.0"), "kafka-native", "4.1.0", True),
        (req(">=2.5.0,<4.0"), "kafka-native", "4.1.0", False),
        (req("no"), "kafka-native", "4.1.0", False),
        (req(">=2.5.0"), "kafka-native", None, True),
        (req(">=2.5.0"), "testcontainers", "apache/kafka:3.9.0", True),
        (req(">=2.5.0"), "testcontainers", "apache/kafka:2.4.0", False),
        (req(">=3.6.0"), "testcontainers", "confluentinc/cp-kafka:7.6.0", True),
        (req(">=3.6.0"), "testcontainers", "confluentinc/cp-kafka:7.5.1", False),
        (req("no"), "external", None, False),
        (req(">=2.5.0"), "external", None, True),
        (req(">=2.5.0", **{"librdkafka-mock": False}), "librdkafka-mock", "2.16.1", False),
        (req(">=2.5.0", **{"librdkafka-mock": True}), "librdkafka-mock", "2.16.1", True),
    ],
)
def test_implemented_by(requirement, kind, version, expected):
    assert implemented_by(requirement, kind, version) is expected


def test_kafka_version_of():
    assert str(kafka_version_of("kafka-native", "4.1.0")) == "4.1.0"
    assert str(kafka_version_of("kafka-native", "3.9.0-SNAPSHOT")) == "3.9.0"
    assert str(kafka_version_of("testcontainers", "confluentinc/cp-kafka:8.0.0")) == "4.0.0"
    assert str(kafka_version_of("testcontainers", "confluentinc/cp-kafka:6.1.0")) == "2.7.0"
    assert kafka_version_of("testcontainers", "apache/kafka") is None
    assert kafka_version_of("kafka-native", "latest") is None


def test_coverage_counts_ids_with_and_without_tests(tmp_path, seeds):
    d = tmp_path / "cat"
    write(d, "kip-98.yaml", GOOD)
    write(
        d,
        "proto.yaml",
        """\
        kip: PROTO
        title: p
        seed: null
        status: protocol
        requirements:
          - id: PROTO.META.001
            section: s
            level: must
            behaviour: b
            oracle: o
            implemented_in: {apache-kafka: ">=0.10", reference: true}
        """,
    )
    catalog = load_catalog(d, seeds_dir=seeds)
    cov = catalog.coverage(["KIP-98.IDEMP.001", "KIP-98.IDEMP.001", "UNKNOWN.X.001"])
    assert set(cov) == {"KIP-98", "PROTO"}
    assert cov["KIP-98"].with_tests == ["KIP-98.IDEMP.001"]
    assert cov["KIP-98"].without_tests == ["KIP-98.TXN.001"]
    assert cov["PROTO"].to_dict()["with_tests"] == 0 and cov["PROTO"].total == 1
    assert cov["KIP-98"].to_dict() == {
        "kip": "KIP-98",
        "total": 2,
        "with_tests": 1,
        "without_tests": 1,
        "tested_ids": ["KIP-98.IDEMP.001"],
        "untested_ids": ["KIP-98.TXN.001"],
    }
    assert catalog.unknown(["KIP-98.TXN.001", "X.Y.001"]) == ["X.Y.001"]
    assert catalog.implemented_by("KIP-98.TXN.001", "kafka-native", "4.0.0") is False


# -- divergence register ---------------------------------------------------------------------------

GOOD_DIV = {
    "divergences": [
        {
            "id": "DIV-001",
            "requirement": "KIP-98.IDEMP.001",
            "kip_text": "the KIP says X",
            "apache_kafka": {"versions": ">=2.5.0", "behaviour": "Kafka does Y"},
            "reference": "kafka",
            "evidence": {"test": "conformance/suites/test_x.py::test_y", "observation": "saw Y"},
        }
    ]
}


def _div(**changes: object) -> dict:
    entry = dict(GOOD_DIV["divergences"][0])
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return {"divergences": [entry]}


def test_register_good_entry(tmp_path, seeds):
    d = tmp_path / "cat"
    write(d, "kip-98.yaml", GOOD)
    catalog = load_catalog(d, seeds_dir=seeds)
    register = parse_register(GOOD_DIV, catalog=catalog)
    entry = register.get("DIV-001")
    assert entry.reference == "kafka" and entry.apache_kafka_versions == ">=2.5.0"
    assert entry.to_dict()["evidence"]["observation"] == "saw Y"
    recorded = [{"requirement": "KIP-98.IDEMP.001", "what": "x"}, {"requirement": "KIP-98.TXN.001", "what": "y"}]
    assert [ids for _, ids in match_recorded(register, recorded)] == [["DIV-001"], []]


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"id": "D-1"}, "id must look like DIV-001"),
        ({"requirement": "kip447"}, "requirement must be a catalog id"),
        ({"requirement": "KIP-98.NOPE.001"}, "requirement KIP-98.NOPE.001 is not in the catalog"),
        ({"reference": "neither"}, "reference must be one of kip, kafka, both"),
        ({"apache_kafka": {"versions": "around 2.5", "behaviour": "b"}}, "apache_kafka.versions must be a version constraint"),
        ({"apache_kafka": {"versions": ">=2.5"}}, "apache_kafka: behaviour must be a non-empty string"),
        ({"evidence": {"test": "t"}}, "evidence: observation must be a non-empty string"),
        ({"kip_text": None}, "missing field 'kip_text'"),
        ({"colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_register_validation_errors(tmp_path, seeds, changes, expected):
    d = tmp_path / "cat"
    write(d, "kip-98.yaml", GOOD)
    catalog = load_catalog(d, seeds_dir=seeds)
    with pytest.raises(RegisterError) as info:
        parse_register(_div(**changes), catalog=catalog)
    assert any(p.startswith("divergences.yaml: ") and expected in p for p in info.value.problems), info.value.problems


def test_register_duplicate_ids_and_file_loading(tmp_path):
    data = {"divergences": GOOD_DIV["divergences"] * 2}
    with pytest.raises(RegisterError, match="DIV-001: duplicate id"):
        parse_register(data)
    path = tmp_path / "div.yaml"
    path.write_text("divergences: [\n")
    with pytest.raises(RegisterError, match="not valid YAML"):
        load_register(path)
    path.write_text("- just a list\n")
    with pytest.raises(RegisterError, match="'divergences' list"):
        load_register(path)
