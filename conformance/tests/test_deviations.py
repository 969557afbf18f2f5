"""The known-deviation register: validation and test matching."""

from pathlib import Path

import pytest

from registers.catalog import get_catalog
from registers.deviations import DeviationError, load_deviations, parse_deviations
from registers.divergences import load_register

pytest_plugins = ("pytester",)

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


def test_a_whole_module_entry_needs_a_signature_and_matches_every_test_of_the_module():
    with pytest.raises(DeviationError, match="needs a signature"):
        parse_deviations({"deviations": [{**ENTRY, "test": "a/test_m.py"}]})
    with pytest.raises(DeviationError, match="bad signature regex"):
        parse_deviations({"deviations": [{**ENTRY, "test": "a/test_m.py", "signature": "("}]})
    (dev,) = parse_deviations({"deviations": [{**ENTRY, "test": "a/test_m.py", "signature": "stall"}]})
    assert dev.matches("librdkafka-mock", None, "conformance/suites/a/test_m.py::test_y[librdkafka-mock]", "test_y")
    assert not dev.matches("librdkafka-mock", None, "conformance/suites/b/test_m.py::test_y[librdkafka-mock]", "test_y")


SIGNED_RUN = '''
import pytest
from registers.deviations import parse_deviations
from conformance.collection import deviation_xfail

(DEV,) = parse_deviations({"deviations": [{
    "id": "DEV-010", "target": "t", "test": "test_signed.py", "requirement": "R", "observed": "o",
    "evidence": "e", "flaky": "failed 1 of 3 runs", "signature": r"coordinator .* timed out after \\d+ms"}]})


@deviation_xfail(DEV)
def test_the_registered_stall():
    assert False, "the coordinator still answered COORDINATOR_NOT_AVAILABLE: timed out after 5000ms"


@deviation_xfail(DEV)
def test_another_bug_in_the_same_test():
    assert 7 not in {7: 2}, "an acknowledged offset was delivered again"


@deviation_xfail(DEV)
def test_the_flake_did_not_happen():
    pass
'''


def test_a_signed_deviation_excuses_only_the_failure_it_describes(pytester):
    """A broker whose durability bug shows up in a test that also has a registered stall
    must still fail it: only a failure matching the signature becomes an xfail."""
    pytester.makepyfile(test_signed=SIGNED_RUN)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:kipcheck", "-q")
    result.assert_outcomes(xfailed=1, failed=1, xpassed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_another_bug_in_the_same_test*"])
