"""Divergence-register lint (issue 14 item 8): every decided ambiguity is pinned, and every
pin is decided.

* An entry's evidence test exists (test_deviations.py checks that) and carries the entry's
  requirement marker, so the pin is counted under the requirement it decides.
* A catalogued requirement with a `conflict` (the KIP text contradicts itself or Kafka) has
  a register entry, unless it is listed in UNDECIDED with the reason no test can pin it yet.
* A suite test that records which side of a KIP-vs-Kafka disagreement the target follows
  (`record_side(...)` or a `follows:` property) carries a requirement with a register entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

from registers.catalog import get_catalog
from registers.divergences import load_register
from conformance.tests.test_marker_lint import SUITES, _module_ids, _requirement_ids

REPO = SUITES.parents[1]

# Conflicts without an entry: nothing on the wire or in a client shows the reading yet.
UNDECIDED = {
    "KIP-932.GREC.001": "record names of __consumer_offsets records; no suite reads that topic's records",
    "KIP-932.SCOORD.004": "record field widths of __share_group_state; no suite reads that topic's records",
    "KIP-932.METRIC.001": "a JMX bean name; no target exposes JMX to the suite",
    "KIP-932.METRIC.002": "a JMX bean name; no target exposes JMX to the suite",
    "KIP-932.GROUP.006": "the DEAD-after-a-period rule has no config to shorten the period; reference: planned",
    "KIP-98.CONFIG.008": "max.in.flight with idempotence is a client setting; no client-config test yet",
    "KIP-TXNRT.OFFSETS.001": "motivation only in the draft; no mechanism to test",
}


def _tests(path: Path) -> dict[str, tuple[ast.FunctionDef, list[str]]]:
    """Top-level test functions of a suite module: name -> (node, requirement ids)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module_ids(tree)
    return {n.name: (n, module + _requirement_ids(n.decorator_list))
            for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def _records_a_side(func: ast.FunctionDef) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "record_side":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("follows:"):
            return True
    return False


def test_evidence_tests_carry_the_entry_requirement():
    problems = []
    for div in load_register(catalog=get_catalog()):
        path, _, name = div.evidence_test.rpartition("::")
        found = _tests(REPO / path).get(name.split("[")[0]) if (REPO / path).is_file() else None
        if found is None:
            problems.append(f"{div.id}: no test {div.evidence_test}")
        elif div.requirement not in found[1]:
            problems.append(f"{div.id}: {div.evidence_test} is not marked {div.requirement}")
    assert not problems, "\n".join(problems)


def test_every_catalogued_conflict_is_decided_or_listed_undecided():
    decided = {d.requirement for d in load_register()}
    conflicts = {r.id for r in get_catalog() if r.extra.get("conflict")}
    assert conflicts, "the catalog lost its conflict fields"
    missing = sorted(conflicts - decided - set(UNDECIDED))
    assert not missing, f"catalog conflicts without a divergence-register entry: {missing}"
    stale = sorted(set(UNDECIDED) & decided) + sorted(set(UNDECIDED) - conflicts)
    assert not stale, f"UNDECIDED entries that are decided or no longer conflicts (remove them): {stale}"


def test_every_side_recording_test_has_a_register_entry():
    decided = {d.requirement for d in load_register()}
    problems = []
    for path in sorted(SUITES.rglob("test_*.py")):
        for name, (func, ids) in _tests(path).items():
            if _records_a_side(func) and not decided & set(ids):
                problems.append(f"{path.relative_to(REPO)}::{name} records a side but none of {ids} has an entry")
    assert not problems, "\n".join(problems)
