"""One protocol vocabulary: ``ApiKey`` matches kio, and nobody re-declares wire integers.

The lint half exists because the integers drifted before: ~30 handlers and half of
``replay/`` each declared their own ``API_KEY = N`` / ``NOT_COORDINATOR = 16``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import DRAFT_KEYS, ApiKey

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "chaos", "benchmarks", "conformance", "replay", "clients", "checkers", "targets", "rules", "reports", "reference_impl", "registers")
VOCABULARY = ROOT / "reference_impl" / "protocol" / "api_keys.py"


def test_every_kio_api_is_a_member_with_kafkas_name():
    assert {k.value for k in ApiKey} - {int(k) for k in DRAFT_KEYS} == set(api_key_map)
    for key, name in api_key_map.items():
        assert ApiKey(key).name == name.upper(), f"api key {key}: kio calls it {name}"


@pytest.mark.parametrize("key", [k for k in ApiKey if k not in DRAFT_KEYS], ids=lambda k: k.name)
def test_member_matches_kio_request_class(key):
    lowest = min(schema_name_map[api_key_map[int(key)]])
    assert load_request_schema(int(key), lowest).__api_key__ == key


def test_draft_keys_have_generated_schemas():
    for key in DRAFT_KEYS:
        assert int(key) not in api_key_map
        assert framing.request_schema(int(key), 0) is not None


def _ints(node: ast.AST) -> list[int] | None:
    """The int literals of `node` (one, or a tuple/list/set of them), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        vals = [_ints(e) for e in node.elts]
        return None if any(v is None for v in vals) else [v[0] for v in vals]
    return None


def _is_api_key(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "api_key"
    if isinstance(node, ast.Attribute):
        return node.attr == "api_key"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "api_key"


def _redeclares(name: str, value: int) -> bool:
    """`name = value` re-declares an api key or an error code the vocabulary has."""
    if name == "API_KEY" or name.endswith("_KEY"):
        return True
    bare = name.removeprefix("API_")
    if bare in ApiKey.__members__ and ApiKey[bare] == value:
        return True
    try:
        return ErrorCode(value).name == name.lower()
    except ValueError:
        return False


def violations(source: str, filename: str = "<src>") -> list[str]:
    """Integer api keys / error codes assigned to names, and `api_key` compared to literals."""
    out = []
    tree = ast.parse(source, filename)
    members = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body}  # enum members
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and id(node) not in members:
            for target in node.targets:
                names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", [])
                values = [node.value] if isinstance(target, ast.Name) else getattr(node.value, "elts", [])
                for t, v in zip(names, values):
                    if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and type(v.value) is int \
                            and _redeclares(t.id, v.value):
                        out.append(f"{filename}:{node.lineno}: {t.id} = {v.value} (use ApiKey / kio ErrorCode)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("supports_api", "max_version", "min_version") \
                and node.args and _ints(node.args[0]) is not None:
            out.append(f"{filename}:{node.lineno}: {node.func.attr}() of an integer literal (use ApiKey)")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_api_key(s) for s in sides) and any(_ints(s) is not None for s in sides):
                out.append(f"{filename}:{node.lineno}: api_key compared to an integer literal (use ApiKey)")
    return out


def test_lint_catches_each_form():
    src = ("API_KEY = 26\nPRODUCE_KEY = 0\nINIT_PRODUCER_ID, END_TXN = 22, 26\nNOT_COORDINATOR = 16\n"
           "if x.api_key == 3: pass\nif api_key in (1, 78): pass\nif r['api_key'] != 0: pass\n"
           "caps.supports_api(19)\n")
    assert len(violations(src)) == 9
    ok = ("API_KEY = ApiKey.END_TXN\nREAD_COMMITTED = 1\nTIMEOUT_S = 3\nif api_key == ApiKey.FETCH: pass\n"
          "ACCEPT, RELEASE = 1, 2\nclass Code(enum.IntEnum):\n    none = 0\n")
    assert violations(ok) == []


def test_no_module_redeclares_protocol_integers():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != VOCABULARY and ".venv" not in path.parts:
                found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)
