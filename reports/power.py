"""The report's "suite power" section, from the table `kipcheck power` writes (power.json):
which seeded reference bugs were run, which the suite caught, and by which tests.

Pure functions over the JSON (no I/O besides `load_power`); `markdown` renders the table
docs/suite-power.md shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

POWER_FILE = "power.json"
_PARAM = re.compile(r"\[[^\]]*\]$")


def load_power(path: str | Path) -> dict[str, Any]:
    """The table at `path` (a power.json, or a directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / POWER_FILE
    return json.loads(p.read_text())


def short_test(nodeid: str) -> str:
    """`file.py::test[param]` -> `file.py::test` (the target parameter says nothing here)."""
    return _PARAM.sub("", nodeid.rsplit("/", 1)[-1])


def power_section(table: Mapping[str, Any]) -> dict[str, Any]:
    """Bugs seeded, bugs caught, and for each bug its ids and catching tests."""
    bugs = []
    for row in table.get("bugs", ()):
        catching = sorted({short_test(t) for t in row.get("catching_tests", ())})
        bugs.append({
            "name": row["name"], "kip": row.get("kip"), "requirement_ids": list(row.get("requirement_ids", ())),
            "caught": bool(row.get("caught")), "tests_run": row.get("tests_run", 0),
            "tests_failed": row.get("tests_failed", 0), "catching_tests": catching, "error": row.get("error"),
        })
    return {
        "seeded": len(bugs),
        "caught": sum(b["caught"] for b in bugs),
        "missed": [b["name"] for b in bugs if not b["caught"]],
        "runtime_s": table.get("runtime_s"),
        "bugs": bugs,
    }


def markdown(section: Mapping[str, Any]) -> str:
    lines = [
        f"{section['caught']} of {section['seeded']} seeded bugs caught"
        + (f" in {section['runtime_s']} s" if section.get("runtime_s") is not None else "") + ".",
        "",
        "| bug | KIP | caught | failed / run | catching tests |",
        "|---|---|---|---|---|",
    ]
    for b in section["bugs"]:
        tests = "<br>".join(b["catching_tests"]) or (b["error"] or "—")
        lines.append(f"| `{b['name']}` | {b['kip']} | {'yes' if b['caught'] else '**no**'} | "
                     f"{b['tests_failed']} / {b['tests_run']} | {tests} |")
    return "\n".join(lines) + "\n"
