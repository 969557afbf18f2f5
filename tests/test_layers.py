"""The floors of the house: a package imports only packages on lower floors, and no two
packages import each other in a loop (docs/architecture.md#floors).

Every module is read, tests included (a package's ``tests/`` folder stands on its package's
floor), and every import counts: at module level, inside functions, and module names given to
``importlib.import_module`` as string constants. A first-party import inside a function must say
why on its own line (a comment), because an import hidden in a function is how the loops of the
old tree went unseen.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FLOORS: dict[str, int] = {
    "cli": 6,
    "chaos": 5, "benchmarks": 5,
    "conformance": 4, "replay": 4, "client_suites": 4,
    "clients": 3, "checkers": 3,
    "targets": 2, "rules": 2, "reports": 2,
    "reference_impl": 1, "registers": 1,
    "tests": 7,  # this folder: repo-wide tests stand above the app
}


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str
    in_function: bool
    commented: bool

    @property
    def package(self) -> str:
        return self.module.split(".")[0]

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line} imports {self.module}"


def _package_of(path: Path) -> str:
    return path.relative_to(REPO).parts[0]


def _modules() -> list[Path]:
    return sorted(p for pkg in FLOORS for p in (REPO / pkg).rglob("*.py"))


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) \
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return [node.args[0].value]
    return []


def _imports_of(path: Path) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for name in _imported_names(child):
                line = lines[child.lineno - 1]
                out.append(Import(path, child.lineno, name, in_function, "#" in line))
            visit(child, inner)

    visit(ast.parse(source, str(path)), False)
    return [i for i in out if i.package in FLOORS]


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return [i for p in _modules() for i in _imports_of(p)]


def test_every_package_has_a_floor() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert packages <= set(FLOORS), f"place these packages on a floor: {sorted(packages - set(FLOORS))}"


def test_no_package_imports_a_higher_floor(imports: list[Import]) -> None:
    upward = [f"{i.where()} (floor {FLOORS[_package_of(i.path)]} -> {FLOORS[i.package]})"
              for i in imports if FLOORS[i.package] > FLOORS[_package_of(i.path)]]
    assert not upward, "imports running back up:\n" + "\n".join(upward)


def test_no_package_loop(imports: list[Import]) -> None:
    edges: dict[str, set[str]] = {pkg: set() for pkg in FLOORS}
    for i in imports:
        if i.package != _package_of(i.path):
            edges[_package_of(i.path)].add(i.package)
    loops = {tuple(sorted(c)) for c in _cycles(edges)}
    assert not loops, f"packages importing each other in a loop: {sorted(loops)}"


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in edges:
        if v not in index:
            strong(v)
    return out


def test_first_party_imports_in_functions_say_why(imports: list[Import]) -> None:
    silent = [i.where() for i in imports if i.in_function and not i.commented]
    assert not silent, "first-party imports inside functions without a reason on the line:\n" + "\n".join(silent)


def test_the_checker_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The reading itself: an upward import hidden in a function, a string import and a loop are seen."""
    module = tmp_path / "m.py"
    module.write_text("import importlib\n\ndef f():\n    from cli import main\n    importlib.import_module('chaos.runner')  # why\n")
    found = [(i.module, i.in_function, i.commented) for i in _imports_of(module)]
    assert found == [("cli", True, False), ("chaos.runner", True, True)]
    assert [sorted(c) for c in _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})] == [["a", "b", "c"]]
