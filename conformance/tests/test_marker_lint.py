"""Marker lint (issue 14 item 7): a requirement marker should name what its test checks.

An AST pass over conformance/suites: for each test's `@pytest.mark.requirement(...)` ids
(decorator, class decorator or module `pytestmark`), look for the id -- in full
(`KIP-98.MARKER.003`) or as area/number (`MARKER.003`) -- in the test's docstring, its
assertion messages and the comments of its body and of the lines just above it. A marker
found in none of them is an *offender*: the test may still assert it (in a scenario it
calls), but a reviewer cannot tell from the test itself.

It is a review aid, not a verdict: the known offenders are listed in
`marker_lint_allowlist.txt` (one `path::test::ID` a line, with a note), and the test fails
only when the list and the suites disagree -- a new offender, or an entry that is fixed or
gone (remove it). `python -m conformance.tests.test_marker_lint --write` rewrites the list.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "conformance" / "suites"
ALLOWLIST = Path(__file__).with_name("marker_lint_allowlist.txt")
COMMENT_LINES_ABOVE = 3
DEFAULT_NOTE = "predates the lint: the id is asserted, if at all, only inside a helper or scenario"
_ID = re.compile(r"^(?P<kip>[A-Z][A-Z0-9-]*)\.(?P<area>[A-Z][A-Z0-9_]*)\.(?P<num>\d{3})$")


@dataclass(frozen=True)
class Offender:
    path: str
    test: str
    rid: str

    @property
    def key(self) -> str:
        return f"{self.path}::{self.test}::{self.rid}"


def _requirement_ids(decorators: list[ast.expr]) -> list[str]:
    """Ids of `@pytest.mark.requirement(...)` and of kip447's `@both_protocols(...)` (the ids its
    consumer-protocol half claims)."""
    ids = []
    for d in decorators:
        if isinstance(d, ast.Call) and (isinstance(d.func, ast.Attribute) and d.func.attr == "requirement"
                                        or isinstance(d.func, ast.Name) and d.func.id == "both_protocols"):
            ids += [a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return ids


def _module_ids(tree: ast.Module) -> list[str]:
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            value = node.value
            marks = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            ids += _requirement_ids(list(marks))
    return ids


def _strings(node: ast.AST | None) -> str:
    """The literal text of an expression (f-string parts included)."""
    if node is None:
        return ""
    return " ".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _comments(source: str) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError):
        pass
    return out


def _evidence(func: ast.FunctionDef | ast.AsyncFunctionDef, comments: dict[int, str]) -> str:
    parts = [ast.get_docstring(func) or ""]
    parts += [_strings(n.msg) for n in ast.walk(func) if isinstance(n, ast.Assert)]
    first = min([func.lineno] + [d.lineno for d in func.decorator_list]) - COMMENT_LINES_ABOVE
    parts += [text for line, text in comments.items() if first <= line <= (func.end_lineno or func.lineno)]
    return "\n".join(parts)


def _named(rid: str, text: str) -> bool:
    m = _ID.match(rid)
    short = f"{m['area']}.{m['num']}" if m else rid
    return rid in text or re.search(rf"(?<![A-Z0-9_]){re.escape(short)}(?!\d)", text) is not None


def offenders_in(path: Path, root: Path = REPO) -> list[Offender]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    comments = _comments(source)
    module_ids = _module_ids(tree)
    rel = path.relative_to(root).as_posix()
    found: list[Offender] = []

    def visit(body: list[ast.stmt], inherited: list[str], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, inherited + _requirement_ids(node.decorator_list), f"{prefix}{node.name}::")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids = list(dict.fromkeys(inherited + _requirement_ids(node.decorator_list)))
                if not ids:
                    continue
                text = _evidence(node, comments)
                found.extend(Offender(rel, prefix + node.name, rid) for rid in ids if not _named(rid, text))

    visit(tree.body, module_ids, "")
    return found


def all_offenders(suites: Path = SUITES) -> list[Offender]:
    return [o for p in sorted(suites.rglob("test_*.py")) for o in offenders_in(p)]


def read_allowlist(path: Path = ALLOWLIST) -> dict[str, str]:
    """{path::test::ID: note}; blank lines and lines starting with # are skipped."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else ():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, note = line.partition("  # ")
        out[key.strip()] = note.strip()
    return out


def write_allowlist(offenders: list[Offender], path: Path = ALLOWLIST) -> None:
    old = read_allowlist(path)
    header = ("# Known requirement markers whose id is named in neither the test's docstring, its\n"
              "# assertion messages nor nearby comments (conformance/tests/test_marker_lint.py).\n"
              "# Fix one by naming the id where it is asserted, then delete its line.\n")
    lines = [f"{o.key}  # {old.get(o.key) or DEFAULT_NOTE}" for o in offenders]
    path.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")


# -- the lint --------------------------------------------------------------------------------


def test_marker_lint_matches_the_allowlist():
    current = {o.key for o in all_offenders()}
    allowed = read_allowlist()
    new = sorted(current - set(allowed))
    stale = sorted(set(allowed) - current)
    assert not new, (
        "requirement markers whose id is not named in the test's docstring, assertion messages or nearby "
        f"comments (name it where it is asserted, or drop the marker): {new}")
    assert not stale, f"allowlist entries no longer offending (delete them from {ALLOWLIST.name}): {stale}"


def test_every_allowlist_entry_has_a_note():
    assert all(allowed for allowed in read_allowlist().values()), "an allowlist entry lacks its note"


# -- the lint's own behaviour, on a small file ------------------------------------------------

SAMPLE = '''
import pytest

pytestmark = [pytest.mark.requirement("KIP-1.MOD.001")]


@pytest.mark.requirement("KIP-98.MARKER.003", "KIP-98.MARKER.004")
def test_named_in_docstring_and_message():
    """KIP-98.MARKER.003: the type is a boolean."""
    assert 1, f"MARKER.004 per partition {1}"


# KIP-98.TXN.006 is pinned right here
@pytest.mark.requirement("KIP-98.TXN.006", "KIP-98.TXN.060", "KIP-1.MOD.001")
def test_comment_above_counts_but_a_prefix_does_not():
    assert 1, "TXN.0601 is another id; MOD.001 named"


class TestGroup:
    @pytest.mark.requirement("KIP-98.ADDOFF.001")
    def test_unnamed(self):
        assert 1
'''


def test_lint_finds_only_unnamed_ids(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(SAMPLE, encoding="utf-8")
    keys = sorted(o.key.split("::", 1)[1] for o in offenders_in(path, root=tmp_path))
    assert keys == [
        "TestGroup::test_unnamed::KIP-1.MOD.001",
        "TestGroup::test_unnamed::KIP-98.ADDOFF.001",
        "test_comment_above_counts_but_a_prefix_does_not::KIP-98.TXN.060",
        "test_named_in_docstring_and_message::KIP-1.MOD.001",
    ], keys


def test_allowlist_round_trip_keeps_notes(tmp_path):
    path = tmp_path / "allow.txt"
    offs = [Offender("a.py", "test_x", "KIP-98.TXN.001"), Offender("a.py", "test_y", "KIP-98.TXN.002")]
    path.write_text("a.py::test_x::KIP-98.TXN.001  # checked inside the scenario\n", encoding="utf-8")
    write_allowlist(offs, path)
    assert read_allowlist(path) == {"a.py::test_x::KIP-98.TXN.001": "checked inside the scenario",
                                    "a.py::test_y::KIP-98.TXN.002": DEFAULT_NOTE}


if __name__ == "__main__":  # python -m conformance.tests.test_marker_lint --write
    if sys.argv[1:] == ["--write"]:
        write_allowlist(all_offenders())
        print(f"wrote {ALLOWLIST}")
    else:
        for o in all_offenders():
            print(o.key)
