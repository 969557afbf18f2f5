"""pytest imports a test module from a folder without ``__init__.py`` by its bare name, so two
such modules with one basename break collection of the second ("import file mismatch"):
a clean-clone CI run found ``test_bad_input.py`` in both reference_impl/tests and cli/tests."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".tox", ".git", "node_modules"}

pytestmark = pytest.mark.deadline(60)


def test_test_modules_outside_packages_have_unique_basenames() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in ROOT.rglob("test_*.py"):
        rel = path.relative_to(ROOT)
        if SKIP & set(rel.parts) or (path.parent / "__init__.py").exists():
            continue
        seen[path.name].append(str(rel))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes
