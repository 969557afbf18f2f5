"""Evidence of every non-passing test, and when each test ran.

For each result row that did not pass: how its requirements are tested (the catalog
oracle), the assertion message, what the run side captured (raw-client exchanges, the
observation against the reference, the target's log tail) and the allure result file of
the test. Allure result files also carry each test's start/stop (epoch ms), which the
timeline uses when the rows have no timestamps of their own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

EVIDENCE_VERDICTS = ("fail", "error", "not_supported", "skipped")
MAX_EXCERPT = 1500


def allure_key(nodeid: str) -> tuple[str, str]:
    """(fullName, name) as allure-pytest writes them for a pytest node id:
    ``kip932/test_m.py::test_x[reference]`` -> (``kip932.test_m#test_x``, ``test_x[reference]``)."""
    path, _, rest = nodeid.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    name = rest.rsplit("::", 1)[-1]
    func = name.split("[", 1)[0]
    return f"{module.replace('/', '.')}#{func}", name


def read_allure(allure_dir: Path | None) -> dict[str, dict[str, Any]]:
    """uuid -> {file, key, start, stop, thread} of every allure result file (may be empty)."""
    out: dict[str, dict[str, Any]] = {}
    if allure_dir is None or not allure_dir.is_dir():
        return out
    for f in allure_dir.glob("*-result.json"):
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(d, dict) or not d.get("uuid"):
            continue
        labels = {lb.get("name"): lb.get("value") for lb in d.get("labels") or [] if isinstance(lb, dict)}
        out[str(d["uuid"])] = {
            "file": f"{allure_dir.name}/{f.name}",
            "key": (str(d.get("fullName") or ""), str(d.get("name") or "")),
            "start": d.get("start"),
            "stop": d.get("stop"),
            "lane": labels.get("thread"),
        }
    return out


def link_allure(rows: list[dict[str, Any]], allure: Mapping[str, Mapping[str, Any]]) -> None:
    """Set row["allure"] (the entry of its result file) by uuid, else by fullName+name.

    Two targets share a fullName but not a name (the target is a test parameter); a rerun
    leaves several files for one key, the latest start wins."""
    by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
    for a in allure.values():
        cur = by_key.get(a["key"])
        if cur is None or (a.get("start") or 0) > (cur.get("start") or 0):
            by_key[a["key"]] = a
    for row in rows:
        uuid = row.get("allure_uuid")
        row["allure"] = allure.get(uuid) if uuid else None
        if row["allure"] is None:
            row["allure"] = by_key.get(allure_key(row["nodeid"]))
        if row["allure"] is None and uuid and allure == {}:
            row["allure"] = {"file": f"allure-results/{uuid}-result.json", "start": None, "stop": None, "lane": None}


def _clip(text: Any, limit: int = MAX_EXCERPT) -> str | None:
    if text is None:
        return None
    s = text if isinstance(text, str) else json.dumps(text, default=str)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def clean_evidence(ev: Any) -> dict[str, Any] | None:
    """The row's `evidence` object, bounded and with only the documented fields."""
    if not isinstance(ev, Mapping):
        return None
    exchanges = []
    for x in (ev.get("exchanges") or [])[-6:]:
        if isinstance(x, Mapping):
            exchanges.append({
                "api": x.get("api"), "api_key": x.get("api_key"), "version": x.get("version"),
                "node": x.get("node"), "request": _clip(x.get("request")), "response": _clip(x.get("response")),
            })
    tail = ev.get("log_tail") or []
    return {
        "assertion": _clip(ev.get("assertion"), 2000),
        "exchanges": exchanges,
        "observation": _clip(ev.get("observation"), 2000),
        "log_tail": [str(x) for x in tail[-40:]] if isinstance(tail, list) else [str(tail)],
        "log_path": ev.get("log_path"),
    }


def non_passing(rows: list[Mapping[str, Any]], req_index: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per test result that did not pass, failures first."""
    order = {"fail": 0, "error": 0, "not_supported": 1, "skipped": 2}
    out = []
    for r in sorted((r for r in rows if r["verdict"] in EVIDENCE_VERDICTS),
                    key=lambda r: (order[r["verdict"]], r["target"], r["nodeid"])):
        ev = r.get("evidence") or {}
        assertion = ev.get("assertion")
        reason = r.get("reason") or ""
        # Never the same text twice: keep the longer of reason and assertion when one holds the other.
        if assertion and reason:
            if reason.strip() in assertion:
                reason = ""
            elif assertion.strip() in reason:
                ev = {**ev, "assertion": None}
        out.append({
            "nodeid": r["nodeid"], "test": r["test"], "target": r["target"], "verdict": r["verdict"],
            "timed_out": bool(r.get("timed_out")), "deadline_s": r.get("deadline_s"),
            "reason": reason or None,
            "requirements": [
                {"id": rid, "level": (req_index.get(rid) or {}).get("level"),
                 "oracle": (req_index.get(rid) or {}).get("oracle")}
                for rid in r["requirements"]
            ],
            "evidence": ev or None,
            "allure": (r.get("allure") or {}).get("file"),
            "deviation": r.get("deviation"),
        })
    return out


def timeline(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """When each test ran: lanes (worker or thread) of [start, duration] bars, seconds from
    the run's first start. Source: the rows' start/stop, else allure's; rows with neither
    are left out (counted in `untimed`). With no times at all, each worker's rows are laid
    end to end in file order (the order that worker ran them)."""
    bars, untimed, sources = [], 0, set()
    for r in rows:
        start, stop, source = r.get("start"), r.get("stop"), "rows"
        if start is None and r.get("allure") and r["allure"].get("start") is not None:
            start = r["allure"]["start"] / 1000.0
            stop = (r["allure"].get("stop") or r["allure"]["start"]) / 1000.0
            source = "allure"
        if start is None:
            untimed += 1
            continue
        sources.add(source)
        lane = r.get("worker") or (r.get("allure") or {}).get("lane") or "main"
        bars.append({"lane": str(lane), "start": float(start), "duration": max(float(stop or start) - float(start), 0.0),
                     "verdict": r["verdict"], "test": r["test"], "target": r["target"]})
    source = "allure" if sources == {"allure"} else "rows" if sources else None
    if not bars and rows:
        source, untimed = "sequential", 0
        clock: dict[str, float] = {}
        for r in rows:
            lane = str(r.get("worker") or "main")
            t = clock.get(lane, 0.0)
            bars.append({"lane": lane, "start": t, "duration": r["duration_s"], "verdict": r["verdict"],
                         "test": r["test"], "target": r["target"]})
            clock[lane] = t + r["duration_s"]
    if bars:
        t0 = min(b["start"] for b in bars)
        for b in bars:
            b["start"] = round(b["start"] - t0, 3)
            b["duration"] = round(b["duration"], 3)
    lanes = sorted({b["lane"] for b in bars})
    return {"source": source if bars else None, "lanes": lanes, "bars": bars, "untimed": untimed}
