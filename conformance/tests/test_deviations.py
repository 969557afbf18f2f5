"""The known-deviation register: validation and test matching."""

import pytest

from conformance.catalog import get_catalog
from conformance.deviations import DeviationError, load_deviations, parse_deviations

ENTRY = {
    "id": "DEV-010",
    "target": "librdkafka-mock",
    "test": "test_x",
    "requirement": "PROTO.BAD.001",
    "observed": "accepts bad CRC",
    "evidence": "seen",
}


def test_packaged_register_is_valid_against_the_catalog():
    deviations = load_deviations(catalog=get_catalog())
    assert deviations, "the packaged register is empty"
    assert len({d.id for d in deviations}) == len(deviations)


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"id": "D-1"}, "id must look like DEV-001"),
        ({"requirement": "PROTO.NOPE.999"}, "not in the catalog"),
        ({"observed": ""}, "missing field 'observed'"),
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"versions": ">=>4"}, "bad versions constraint"),
    ],
)
def test_bad_entries_are_rejected_with_the_entry_named(change, problem):
    with pytest.raises(DeviationError, match=problem):
        parse_deviations({"deviations": [{**ENTRY, **change}]}, catalog=get_catalog())


def test_duplicate_ids_rejected():
    with pytest.raises(DeviationError, match="duplicate id"):
        parse_deviations({"deviations": [ENTRY, ENTRY]})


def test_matching_by_kind_name_module_and_version():
    (dev,) = parse_deviations({"deviations": [ENTRY]})
    assert dev.matches("librdkafka-mock", None, "conformance/suites/a/test_m.py::test_x[librdkafka-mock]", "test_x")
    assert not dev.matches("reference", None, "x::test_x", "test_x")
    assert not dev.matches("librdkafka-mock", None, "x::test_y", "test_y")
    (scoped,) = parse_deviations({"deviations": [{**ENTRY, "test": "test_m.py::test_x", "versions": "<4.2"}]})
    assert scoped.matches("librdkafka-mock", "4.1.2", "suites/test_m.py::test_x[t]", "test_x")
    assert not scoped.matches("librdkafka-mock", "4.2.1", "suites/test_m.py::test_x[t]", "test_x")
    assert not scoped.matches("librdkafka-mock", "4.1.2", "suites/test_n.py::test_x[t]", "test_x")
    assert "DEV-010" in dev.reason and "PROTO.BAD.001" in dev.reason


def test_divergence_evidence_names_an_existing_suite_test():
    """Every divergence's evidence test exists, so the register cannot cite phantom evidence."""
    from pathlib import Path

    from conformance.divergences import load_register

    root = Path(__file__).resolve().parents[2]
    sources = {p: p.read_text() for p in (root / "conformance" / "suites").rglob("test_*.py")}
    for div in load_register(catalog=get_catalog()):
        path, _, name = div.evidence_test.rpartition("::")
        name = name.split("[")[0]
        candidates = [src for p, src in sources.items() if not path or str(p).endswith(path)]
        assert any(f"def {name}(" in src for src in candidates), f"{div.id}: no suite test {div.evidence_test}"


def test_a_parametrised_entry_matches_only_that_parametrisation():
    (dev,) = parse_deviations({"deviations": [{**ENTRY, "test": "a/test_m.py::test_x[librdkafka-mock-raw]"}]})
    assert dev.matches("librdkafka-mock", None, "conformance/suites/a/test_m.py::test_x[librdkafka-mock-raw]", "test_x")
    assert not dev.matches("librdkafka-mock", None, "conformance/suites/a/test_m.py::test_x[librdkafka-mock-other]", "test_x")
    assert not dev.matches("librdkafka-mock", None, "conformance/suites/b/test_m.py::test_x[librdkafka-mock-raw]", "test_x")


def test_a_flaky_entry_carries_its_rate_and_is_not_strict():
    (dev,) = parse_deviations({"deviations": [{**ENTRY, "flaky": "failed 1 of 2 runs"}]})
    (strict,) = parse_deviations({"deviations": [ENTRY]})
    assert dev.flaky == "failed 1 of 2 runs" and strict.flaky is None
    assert "[flaky: failed 1 of 2 runs]" in dev.reason
