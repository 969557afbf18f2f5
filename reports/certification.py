"""Build the vendor certification report model from conformance results.

Inputs:
  * results rows: JSON lines written by the conformance pytest plugin, one file per
    xdist worker in ``<out>/results/*.jsonl``;
  * target descriptions: ``<out>/results/targets-<worker>.json`` (merged over workers);
  * the requirement catalog (``registers/catalog/*.yaml``);
  * the divergence register (``registers/divergences.yaml``);
  * the deviation register (``registers/deviations/``): known failures of named
    targets; a result row whose reason names a DEV id is linked to its entry, and its
    verdict stays "fail" (a known deviation is still non-compliance);
  * optional run metadata written by ``kipcheck certify`` (``<out>/run.json``).

Output: a plain, JSON-serialisable dict (see docs/report.md for the schema). Honesty
rules: a requirement passes on a target only when every covering test that ran there
passed; "not supported by target" and skipped tests are never counted as passes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import re
import socket
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from reports import outcome as _outcome
from reports.evidence import clean_evidence, link_allure, non_passing, read_allure, timeline
from reports.statement import build_statement

SCHEMA = "kipcheck-certification-report"
SCHEMA_VERSION = 4  # 4: deviations.register[].flaky and .signature; 3: statement, self_checks, non_passing, timeline; outcome rules (reports/outcome.py)

# Test-level verdicts written by the conformance plugin.
TEST_VERDICTS = ("pass", "fail", "error", "not_supported", "skipped")
# Requirement-level verdicts (per requirement, per target).
REQ_VERDICTS = ("pass", "fail", "not_supported", "incomplete", "untested")
# On a narrowed run a requirement no selected test covers is out of scope, not untested.
OUT_OF_SCOPE = "out_of_scope"
# KIP-level verdict words (per KIP row, per target column of the matrix).
KIP_VERDICTS = ("compliant", "non-compliant", "partial", "not supported", "untested", "out of scope",
                "incomplete", "not run")

# Top-level keys of report.json; tests pin this set so schema changes are deliberate.
REPORT_KEYS = (
    "schema",
    "schema_version",
    "generated_at",
    "kipcheck_version",
    "host",
    "run",
    "statement",
    "targets",
    "summary",
    "kips",
    "requirements",
    "non_passing",
    "self_checks",
    "timeline",
    "divergences",
    "deviations",
    "tests_without_requirements",
    "uncatalogued_requirements",
    "problems",
)

# Matrix rows the certification report always shows; one missing from the catalog gets
# an empty "untested" row (and a problem) instead of silently disappearing.
EXPECTED_KIPS = ("KIP-98", "KIP-447", "KIP-TXNRT", "KIP-932", "KIP-1289", "PROTO")

UNCATALOGUED = "(not in catalog)"

# How the conformance plugin words a registered deviation (registers/deviations.py:
# Deviation.reason is "registered deviation DEV-00N (REQ): observed"): a strict xfail
# that failed as expected, or a strict xpass (the deviation did not occur this time).
_DEV_EXPECTED = re.compile(r"^\s*expected failure \(xfail\): registered deviation (DEV-\d{3,})\b")
_DEV_XPASS = re.compile(r"^\s*\[XPASS\(strict\)\]\s*registered deviation (DEV-\d{3,})\b")
EXPECTED_FAILURE = "expected-failure"
UNEXPECTED_PASS = "unexpected-pass"
NO_TARGET = "(self-checks, no target)"  # rows of tests that use no target: model and reference-vs-reference checks


# ---------------------------------------------------------------------------------
# small helpers


def kipcheck_version() -> str:
    try:
        from importlib.metadata import version

        return version("kipcheck")
    except Exception:  # running from a source tree that is not installed
        return "unknown"


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def normalize_kip(kip: Any) -> str:
    """`98`, `kip98`, `KIP 98` -> `KIP-98`; anything else is kept as written."""
    text = str(kip).strip()
    m = re.fullmatch(r"(?i)(?:kip[\s_-]*)?(\d+)", text)
    if m:
        return f"KIP-{int(m.group(1))}"
    return text


def kip_sort_key(kip: str, status: str | None = None) -> tuple:
    """Matrix row order: KIP-98, KIP-447, draft round-trip, KIP-932, KIP-1289, PROTO, rest."""
    k = kip.upper()
    fixed = {"KIP-98": 0, "KIP-447": 1, "KIP-932": 3, "KIP-1289": 4}
    if k in fixed:
        return (fixed[k], k)
    if status == "draft" or any(w in k for w in ("DRAFT", "ROUND", "TXNRT")):
        return (2, k)
    if k.startswith("PROTO"):
        return (5, k)
    if kip == UNCATALOGUED:
        return (9, k)
    m = re.fullmatch(r"KIP-(\d+)", k)
    return (6, int(m.group(1)) if m else 10**9, k)


def _as_plain(obj: Any) -> Any:
    """Dataclasses / objects / mappings -> plain dicts and lists (for loader outputs)."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _as_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _as_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_as_plain(v) for v in obj]
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return {k: _as_plain(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return obj


# ---------------------------------------------------------------------------------
# catalog and divergence register


def _package_path(*parts: str) -> Path | None:
    try:
        from importlib.resources import files

        p = files("conformance").joinpath(*parts)
        return Path(str(p))
    except Exception:
        return None


def _yaml_load(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _normalize_kip_doc(doc: Mapping[str, Any], source: str = "") -> dict[str, Any]:
    kip = normalize_kip(doc.get("kip") or Path(source).stem or "?")
    reqs = []
    for r in doc.get("requirements") or []:
        r = _as_plain(r)
        if not isinstance(r, Mapping) or not r.get("id"):
            continue
        reqs.append(
            {
                "id": str(r["id"]),
                "section": r.get("section"),
                "level": r.get("level"),
                "behaviour": r.get("behaviour") or r.get("behavior") or "",
                "oracle": r.get("oracle"),
                "implemented_in": r.get("implemented_in") or {},
            }
        )
    return {
        "kip": kip,
        "title": doc.get("title") or "",
        "seed": doc.get("seed"),
        "status": doc.get("status"),
        "source": source,
        "requirements": reqs,
    }


class CatalogProblem(ValueError):
    """The catalog could not be loaded or is invalid; the message lists why."""


def load_catalog_docs(path: str | Path | None = None, *, strict: bool = True) -> list[dict[str, Any]]:
    """The requirement catalog as a list of KIP documents (normalized plain dicts).

    `path` is a catalog directory (default: the packaged `conformance/catalog`). The
    validating loader `registers.catalog.load_catalog` is used; with strict=False an
    invalid catalog is read as raw YAML instead (the caller records the problem).
    """
    try:
        from registers.catalog import load_catalog
    except ImportError:  # pragma: no cover - the loader ships with kipcheck
        load_catalog = None
    if load_catalog is not None:
        try:
            return docs_from_catalog(load_catalog(path) if path is not None else load_catalog())
        except Exception as exc:  # CatalogError (ValueError) and friends
            if strict:
                raise CatalogProblem(str(exc)) from exc
    return load_catalog_yaml(path)


def docs_from_catalog(cat: Any) -> list[dict[str, Any]]:
    """A `registers.catalog.Catalog` -> normalized KIP documents in matrix order."""
    docs = []
    listed: set[str] = set()
    for kip, doc in cat.kips.items():
        reqs = []
        for rid in doc.requirement_ids:
            r = cat.requirements.get(rid)
            if r is None:
                continue
            listed.add(rid)
            reqs.append(_req_from_obj(r))
        docs.append(
            {"kip": kip, "title": doc.title, "seed": doc.seed, "status": doc.status, "source": doc.file, "requirements": reqs}
        )
    stray = [r for rid, r in cat.requirements.items() if rid not in listed]
    if stray:
        docs.extend(_docs_from_requirement_list([_req_from_obj(r) | {"kip": r.kip} for r in stray], None))
    return _merge_docs(docs)


def _req_from_obj(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "section": getattr(r, "section", None),
        "level": getattr(r, "level", None),
        "behaviour": getattr(r, "behaviour", "") or "",
        "oracle": getattr(r, "oracle", None),
        "implemented_in": dict(getattr(r, "implemented_in", {}) or {}),
    }


def load_catalog_yaml(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read catalog YAML without validation (fallback for an invalid catalog)."""
    p = Path(path) if path is not None else _package_path("catalog")
    if p is None or not p.exists():
        return []
    files = (sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))) if p.is_dir() else [p]
    docs = []
    for f in files:
        try:
            data = _yaml_load(f)
        except Exception:
            continue
        if isinstance(data, list):
            docs.extend(_normalize_kip_doc(d, str(f)) for d in data if isinstance(d, Mapping))
        elif isinstance(data, Mapping):
            docs.append(_normalize_kip_doc(data, str(f)))
    return _merge_docs(docs)


def _docs_from_requirement_list(items: Iterable[Mapping[str, Any]], kips: Any) -> list[dict[str, Any]]:
    by_kip: dict[str, list] = defaultdict(list)
    for r in items:
        by_kip[normalize_kip(r.get("kip", "?"))].append(r)
    meta = {}
    if isinstance(kips, Mapping):
        meta = {normalize_kip(k): v for k, v in kips.items() if isinstance(v, Mapping)}
    elif isinstance(kips, list):
        meta = {normalize_kip(k.get("kip")): k for k in kips if isinstance(k, Mapping)}
    return [_normalize_kip_doc({**meta.get(k, {}), "kip": k, "requirements": rs}) for k, rs in by_kip.items()]


def _merge_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One document per KIP (several files may describe one KIP), in matrix order."""
    merged: dict[str, dict[str, Any]] = {}
    for d in docs:
        cur = merged.get(d["kip"])
        if cur is None:
            merged[d["kip"]] = {**d, "requirements": list(d["requirements"])}
        else:
            known = {r["id"] for r in cur["requirements"]}
            cur["requirements"].extend(r for r in d["requirements"] if r["id"] not in known)
            for k in ("title", "seed", "status"):
                cur[k] = cur[k] or d[k]
    return sorted(merged.values(), key=lambda d: kip_sort_key(d["kip"], d.get("status")))


def load_divergence_register(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Entries of registers/divergences.yaml (a list, or a mapping with a list)."""
    p = Path(path) if path is not None else _package_path("divergences.yaml")
    if p is None or not p.is_file():
        return []
    data = _yaml_load(p)
    if isinstance(data, Mapping):
        for key in ("divergences", "entries", "register"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            # {id: {...}} form
            data = [{"id": k, **v} for k, v in data.items() if isinstance(v, Mapping)]
    if not isinstance(data, list):
        return []
    out = []
    for e in data:
        if not isinstance(e, Mapping):
            continue
        ak = e.get("apache_kafka") or {}
        ev = e.get("evidence") or {}
        out.append(
            {
                "id": str(e.get("id", "")),
                "requirement": e.get("requirement"),
                "kip_text": e.get("kip_text"),
                "apache_kafka": {
                    "versions": ak.get("versions") if isinstance(ak, Mapping) else None,
                    "behaviour": ak.get("behaviour") if isinstance(ak, Mapping) else ak,
                },
                "reference": e.get("reference"),
                "evidence": {
                    "test": ev.get("test") if isinstance(ev, Mapping) else None,
                    "observation": ev.get("observation") if isinstance(ev, Mapping) else ev,
                },
                "notes": e.get("notes"),
            }
        )
    return out


def load_deviation_register(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Entries of registers/deviations/ as plain dicts ([] when the file is absent).

    Read with the validating loader `registers.deviations.load_deviations` (without a
    catalog: requirement ids are checked by the conformance tests); an invalid register
    raises its `DeviationError`, which the caller records as a problem.
    """
    from registers.deviations import DEFAULT_DEVIATIONS, load_deviations

    p = Path(path) if path is not None else DEFAULT_DEVIATIONS
    if not p.exists():
        return []
    return [
        {
            "id": d.id,
            "target": d.target,
            "versions": d.versions,
            "test": d.test,
            "requirement": d.requirement,
            "observed": d.observed,
            "evidence": d.evidence,
            "flaky": d.flaky,
            "signature": d.signature,
        }
        for d in load_deviations(p)
    ]


def deviation_of(verdict: str, reason: str | None) -> dict[str, str] | None:
    """The registered deviation a failing result row names, if any.

    {"id": "DEV-001", "status": "expected-failure"} for a strict xfail that failed as
    registered; status "unexpected-pass" for a strict xpass (the test passed, so the
    deviation did not occur and the register entry may be stale). None otherwise.
    """
    if verdict != "fail" or not reason:
        return None
    m = _DEV_EXPECTED.match(reason)
    if m:
        return {"id": m.group(1), "status": EXPECTED_FAILURE}
    m = _DEV_XPASS.match(reason)
    if m:
        return {"id": m.group(1), "status": UNEXPECTED_PASS}
    return None


# ---------------------------------------------------------------------------------
# results


class Results:
    """Rows, target descriptions and run metadata read from a results directory."""

    def __init__(
        self,
        rows: list[dict[str, Any]] | None = None,
        targets: dict[str, dict[str, Any]] | None = None,
        run: dict[str, Any] | None = None,
        problems: list[str] | None = None,
    ) -> None:
        self.rows = rows or []
        self.targets = targets or {}
        self.run = run or {}
        self.problems = problems or []


def read_results(results_dir: str | Path) -> Results:
    """Read every worker's rows and target files; tolerate partial or malformed files."""
    d = Path(results_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"results directory {d} does not exist")
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    for f in sorted(d.glob("*.jsonl")) + sorted(d.glob("*.ndjson")):
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    problems.append(f"{f.name}:{n}: unreadable result row ({exc.msg})")
                    continue
                if isinstance(row, dict) and "verdict" in row:
                    # Each worker appends its rows in the order it ran them (timeline fallback).
                    row.setdefault("worker", f.stem.removeprefix("results-"))
                    rows.append(row)
                else:
                    problems.append(f"{f.name}:{n}: not a result row")
    targets: dict[str, dict[str, Any]] = {}
    for f in sorted(d.glob("targets*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            problems.append(f"{f.name}: unreadable target description ({exc})")
            continue
        if isinstance(data, dict):
            merge_target_descriptions(targets, data)
    run = _read_run_metadata(d, problems)
    return Results(rows, targets, run, problems)


def _read_json(path: Path, problems: list[str], what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        problems.append(f"{path.name}: unreadable {what} ({exc})")
        return {}
    return data if isinstance(data, dict) else {}


def _read_run_metadata(d: Path, problems: list[str]) -> dict[str, Any]:
    """session.json (written by the plugin) overlaid with run.json (written by certify)."""
    run: dict[str, Any] = {}
    session = d / "session.json"
    if session.is_file():
        s = _read_json(session, problems, "session metadata")
        for src, dst in (("started_at", "started_at"), ("finished_at", "finished_at"), ("targets", "targets"),
                         ("exitstatus", "pytest_exit_code"), ("differential", "differential")):
            if s.get(src) is not None:
                run[dst] = s[src]
        if isinstance(s.get("args"), list):
            run.setdefault("pytest_args", s["args"])
    # OUT/run.json: certify's command record; OUT/results/run.json: the run side's
    # completeness record (schema 1), which wins where both say something.
    for cand in (d.parent / "run.json", d / "run.json"):
        if cand.is_file():
            run.update(_read_json(cand, problems, "run metadata"))
    if run.get("wall_time_s") is None and run.get("started_at") and run.get("finished_at"):
        try:
            t0 = _dt.datetime.fromisoformat(str(run["started_at"]))
            t1 = _dt.datetime.fromisoformat(str(run["finished_at"]))
            run["wall_time_s"] = round((t1 - t0).total_seconds(), 3)
        except ValueError:
            pass
    return run


def merge_target_descriptions(into: dict[str, dict[str, Any]], data: Mapping[str, Any]) -> None:
    """Merge one worker's target file into `into` (non-null values win).

    Accepts the plugin's ``{"worker": w, "targets": {spec: {...}}}`` and the bare
    ``{spec: {"describe": {...}, "capabilities": {...}}}``. A part that is only
    ``{"error": ...}`` (describe or probe failed) is kept as an error string.
    """
    if isinstance(data.get("targets"), Mapping):
        data = data["targets"]
    for spec, info in data.items():
        if not isinstance(info, Mapping):
            continue
        cur = into.setdefault(
            str(spec), {"describe": {}, "capabilities": {}, "errors": [], "start_error": None, "skip_reason": None}
        )
        for key in ("start_error", "skip_reason", "kind"):
            if info.get(key):
                cur[key] = str(info[key])
        for part in ("describe", "capabilities"):
            src = info.get(part)
            if not isinstance(src, Mapping):
                continue
            if set(src) == {"error"}:
                msg = f"{part}: {src['error']}"
                if msg not in cur["errors"]:
                    cur["errors"].append(msg)
                continue
            for k, v in src.items():
                if v is None or v == {} or v == []:
                    cur[part].setdefault(k, v)
                elif k == "startup_seconds" and isinstance(cur[part].get(k), (int, float)):
                    # Each worker starts its own cluster: keep the slowest start.
                    cur[part][k] = max(cur[part][k], v)
                else:
                    cur[part][k] = v


# ---------------------------------------------------------------------------------
# aggregation


def requirement_verdict(tests: list[dict[str, Any]]) -> tuple[str, str]:
    """Verdict and reason of one requirement on one target, from its covering tests."""
    if not tests:
        return "untested", "no test covering this requirement ran on this target"
    c = Counter(t["verdict"] for t in tests)

    def reasons(*verdicts: str) -> str:
        seen: list[str] = []
        for t in tests:
            if t["verdict"] in verdicts:
                r = f"{t['test']}: {t['reason']}" if t.get("reason") else f"{t['test']}: {t['verdict']}"
                if r not in seen:
                    seen.append(r)
        return "; ".join(seen)

    if c["fail"] or c["error"]:
        return "fail", reasons("fail", "error")
    if c["pass"] and not c["not_supported"] and not c["skipped"]:
        return "pass", f"{c['pass']} covering test(s) passed"
    if c["pass"]:
        parts = [f"{c['pass']} passed"]
        if c["not_supported"]:
            parts.append(f"{c['not_supported']} not supported by target")
        if c["skipped"]:
            parts.append(f"{c['skipped']} skipped")
        detail = reasons("not_supported", "skipped")
        return "incomplete", ", ".join(parts) + (f" ({detail})" if detail else "")
    if c["not_supported"]:
        return "not_supported", reasons("not_supported")
    return "untested", "every covering test was skipped: " + reasons("skipped")


def kip_verdict(counts: Mapping[str, int]) -> str:
    """Verdict word of a KIP row on one target from its requirement verdict counts."""
    tested = sum(counts.get(v, 0) for v in ("pass", "fail", "not_supported", "incomplete"))
    if tested == 0:
        return "untested"
    if counts.get("fail", 0):
        return "non-compliant"
    if counts.get("pass", 0) and not counts.get("not_supported", 0) and not counts.get("incomplete", 0):
        return "compliant"
    if not counts.get("pass", 0) and not counts.get("incomplete", 0):
        return "not supported"
    return "partial"


def _clean_row(row: Mapping[str, Any]) -> dict[str, Any]:
    verdict = str(row.get("verdict", "error"))
    reason = row.get("reason") or ""
    if verdict not in TEST_VERDICTS:
        reason = f"unknown verdict {verdict!r} reported" + (f": {reason}" if reason else "")
        verdict = "error"
    nodeid = str(row.get("nodeid") or row.get("test") or "?")
    reqs = row.get("requirements") or []
    if isinstance(reqs, str):
        reqs = [reqs]
    try:
        duration = float(row.get("duration_s") or 0.0)
    except (TypeError, ValueError):
        duration = 0.0
    return {
        "nodeid": nodeid,
        "test": str(row.get("test") or nodeid.rsplit("::", 1)[-1]),
        "suite": row.get("suite"),
        "target": str(row.get("target") or NO_TARGET),
        "target_kind": row.get("target_kind"),
        "target_version": row.get("target_version"),
        "requirements": [str(r) for r in reqs],
        "verdict": verdict,
        "reason": str(reason),
        "duration_s": duration,
        "divergences": [d for d in (row.get("divergences") or []) if isinstance(d, Mapping)],
        "deviation": deviation_of(verdict, str(reason)),
        "timed_out": bool(row.get("timed_out")),
        "deadline_s": row.get("deadline_s"),
        "evidence": clean_evidence(row.get("evidence")),
        "allure_uuid": row.get("allure_uuid"),
        "worker": row.get("worker"),
        "start": _num(row.get("start")),
        "stop": _num(row.get("stop")),
    }


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def build_report(
    results: Results,
    catalog: list[dict[str, Any]],
    register: list[dict[str, Any]] | None = None,
    target_order: list[str] | None = None,
    expected_kips: Iterable[str] = (),
    deviations: list[dict[str, Any]] | None = None,
    allure: Mapping[str, Mapping[str, Any]] | None = None,
    catalog_path: str | Path | None = None,
) -> dict[str, Any]:
    """The report model (a plain dict; see docs/report.md)."""
    problems = list(results.problems)
    catalog = list(catalog)
    have = {d["kip"] for d in catalog}
    missing = [k for k in expected_kips if k not in have]
    if missing:
        problems.append(f"no requirements in the catalog for {', '.join(missing)} (shown as untested)")
        catalog += [
            {"kip": k, "title": "no requirements catalogued yet", "seed": None, "status": None, "source": "",
             "requirements": []}
            for k in missing
        ]
        catalog.sort(key=lambda d: kip_sort_key(d["kip"], d.get("status")))
    # De-duplicate: the last row for (nodeid, target) wins (e.g. a rerun appended).
    dedup: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in results.rows:
        row = _clean_row(raw)
        dedup[(row["nodeid"], row["target"])] = row
    all_rows = list(dedup.values())
    link_allure(all_rows, allure or {})
    # Self-checks (tests that use no target: model and reference-vs-reference checks) are
    # reported apart; they are no cluster and never a matrix column.
    self_rows = [r for r in all_rows if r["target"] == NO_TARGET]
    rows = [r for r in all_rows if r["target"] != NO_TARGET]
    decided = _outcome.decide(results.run, all_rows)
    result, narrowed = decided["result"], decided["completeness"]["narrowed"]

    # Targets: the requested ones (in order), then any other seen in rows. A target that
    # is only described (e.g. the reference started as differential oracle) is not a column.
    specs: list[str] = []
    for s in list(target_order or results.run.get("targets") or []) + [r["target"] for r in rows]:
        if s not in specs and s != NO_TARGET:
            specs.append(s)
    if not specs:
        specs = [s for s in results.targets if s != NO_TARGET]

    # Catalog index.
    kips = [dict(d) for d in catalog]
    req_index: dict[str, dict[str, Any]] = {}
    for d in kips:
        for r in d["requirements"]:
            req_index.setdefault(r["id"], {**r, "kip": d["kip"]})

    # Coverage: requirement -> target -> [rows].
    cover: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    without_reqs: list[dict[str, Any]] = []
    uncatalogued: set[str] = set()
    for row in rows:
        if not row["requirements"]:
            without_reqs.append(row)
        for rid in row["requirements"]:
            cover[rid][row["target"]].append(row)
            if rid not in req_index:
                uncatalogued.add(rid)
    if uncatalogued:
        problems.append(
            f"{len(uncatalogued)} requirement id(s) used by tests are not in the catalog: "
            + ", ".join(sorted(uncatalogued))
        )
        kips.append(
            {
                "kip": UNCATALOGUED,
                "title": "requirement ids used by tests but missing from the catalog",
                "seed": None,
                "status": None,
                "source": "",
                "requirements": [
                    {"id": rid, "section": None, "level": None, "behaviour": "", "oracle": None, "implemented_in": {}}
                    for rid in sorted(uncatalogued)
                ],
            }
        )
        for r in kips[-1]["requirements"]:
            req_index[r["id"]] = {**r, "kip": UNCATALOGUED}

    # Per-requirement verdicts.
    requirements_out: list[dict[str, Any]] = []
    for d in kips:
        for r in d["requirements"]:
            rid = r["id"]
            per_target = {}
            all_tests: dict[str, str] = {}
            for spec in specs:
                tests = sorted(cover.get(rid, {}).get(spec, []), key=lambda t: t["nodeid"])
                verdict, reason = requirement_verdict(tests)
                if verdict == "untested" and narrowed and not tests:
                    verdict, reason = OUT_OF_SCOPE, "no test covering this requirement was selected in this run"
                known = []
                for t in tests:
                    dv = t["deviation"]
                    if dv and dv["status"] == EXPECTED_FAILURE and dv["id"] not in known:
                        known.append(dv["id"])
                per_target[spec] = {
                    "verdict": verdict,
                    "reason": reason,
                    "known_deviations": known,
                    "tests": [
                        {"nodeid": t["nodeid"], "verdict": t["verdict"], "reason": t["reason"],
                         "duration_s": t["duration_s"], "deviation": t["deviation"], "timed_out": t["timed_out"]}
                        for t in tests
                    ],
                }
            for tgt_rows in cover.get(rid, {}).values():
                for t in tgt_rows:
                    all_tests.setdefault(t["nodeid"], t["test"])
            requirements_out.append(
                {
                    "id": rid,
                    "kip": d["kip"],
                    "section": r.get("section"),
                    "level": r.get("level"),
                    "behaviour": r.get("behaviour") or "",
                    "oracle": r.get("oracle"),
                    "implemented_in": r.get("implemented_in") or {},
                    "in_catalog": d["kip"] != UNCATALOGUED,
                    "tested": bool(all_tests),
                    "tests": [{"nodeid": n, "test": t} for n, t in sorted(all_tests.items())],
                    "per_target": per_target,
                }
            )
    by_id = {r["id"]: r for r in requirements_out}

    # Per-KIP matrix.
    kips_out = []
    for d in kips:
        ids = [r["id"] for r in d["requirements"]]
        per_target = {}
        must = {}
        must_ids = [i for i in ids if str(by_id[i].get("level") or "").lower() == "must"]
        for spec in specs:
            per_target[spec] = _cell(Counter(by_id[i]["per_target"][spec]["verdict"] for i in ids), result, narrowed)
            must[spec] = _cell(Counter(by_id[i]["per_target"][spec]["verdict"] for i in must_ids), result, narrowed)
        kips_out.append(
            {
                "kip": d["kip"],
                "title": d.get("title") or "",
                "status": d.get("status"),
                "seed": d.get("seed"),
                "requirements": ids,
                "untested": [i for i in ids if not by_id[i]["tested"]],
                "must_total": len(must_ids),
                "per_target": per_target,
                "must": must,
            }
        )

    # Targets.
    targets_out = []
    for spec in specs:
        info = results.targets.get(spec, {})
        desc = dict(info.get("describe") or {})
        caps = dict(info.get("capabilities") or {})
        recorded = _run_target(results.run, spec)  # what the run side asked the cluster
        for key, src in (("cluster_id", "cluster_id"), ("bootstrap", "bootstrap"), ("version", "broker_version"),
                         ("security_protocol", "security_protocol"), ("finalized_features", "finalized_features")):
            if desc.get(key) in (None, {}, "") and recorded.get(src) not in (None, {}, ""):
                desc[key] = recorded[src]
        trows = [r for r in rows if r["target"] == spec]
        first = trows[0] if trows else {}
        counts = Counter(r["verdict"] for r in trows)
        targets_out.append(
            {
                "spec": spec,
                "kind": desc.get("kind") or info.get("kind") or first.get("target_kind") or spec.split(":", 1)[0],
                "version": desc.get("version") or first.get("target_version"),
                "nodes": desc.get("nodes"),
                "bootstrap": desc.get("bootstrap"),
                "cluster_id": desc.get("cluster_id"),
                "security_protocol": desc.get("security_protocol"),
                "startup_seconds": desc.get("startup_seconds"),
                "finalized_features": dict(caps.get("finalized_features") or desc.get("finalized_features") or {}),
                "supported_features": dict(caps.get("supported_features") or {}),
                "api_versions": dict(caps.get("api_versions") or {}),
                "described": bool(desc),
                "start_error": info.get("start_error"),
                "skip_reason": info.get("skip_reason"),
                "errors": list(info.get("errors") or []),
                "tests": {v: counts.get(v, 0) for v in TEST_VERDICTS},
                "tests_total": len(trows),
                "test_duration_s": round(sum(r["duration_s"] for r in trows), 3),
            }
        )
        if info.get("start_error"):
            problems.append(f"target {spec} failed to start: {info['start_error']}")
        if info.get("skip_reason"):
            problems.append(f"target {spec} skipped: {info['skip_reason']}")
        if not trows:
            problems.append(f"target {spec}: no test results")

    # Divergences.
    observed = []
    for row in sorted(rows, key=lambda r: (r["target"], r["nodeid"])):
        for dv in row["divergences"]:
            observed.append(
                {
                    "target": row["target"],
                    "nodeid": row["nodeid"],
                    "test": row["test"],
                    "verdict": row["verdict"],
                    "requirement": dv.get("requirement"),
                    "what": dv.get("what"),
                    "observed": dv.get("target"),
                    "reference": dv.get("reference"),
                }
            )

    # Known target deviations: the register, and the rows that name one of its entries.
    deviation_register = [dict(d) for d in (deviations or [])]
    registered = {d["id"] for d in deviation_register}
    matched = []
    for row in sorted(rows, key=lambda r: (r["target"], r["nodeid"])):
        dv = row["deviation"]
        if not dv:
            continue
        matched.append(
            {
                "id": dv["id"],
                "status": dv["status"],
                "target": row["target"],
                "target_kind": row["target_kind"],
                "nodeid": row["nodeid"],
                "test": row["test"],
                "requirements": list(row["requirements"]),
                "verdict": row["verdict"],
            }
        )
        if dv["status"] == UNEXPECTED_PASS:
            problems.append(
                f"registered deviation {dv['id']} did not occur on {row['target']} ({row['nodeid']}): the test "
                "passed, so its strict xfail failed; if the target is fixed, remove the entry from "
                "registers/deviations/"
            )
    unregistered = sorted({m["id"] for m in matched} - registered)
    if unregistered:
        problems.append(
            "results name deviation(s) missing from the deviation register: " + ", ".join(unregistered)
        )

    # Summary.
    test_counts = Counter(r["verdict"] for r in rows)
    per_target_summary = {}
    for spec in specs:
        counts = Counter(r["per_target"][spec]["verdict"] for r in requirements_out if r["in_catalog"])
        per_target_summary[spec] = _cell(counts, result, narrowed)
    catalogued = [r for r in requirements_out if r["in_catalog"]]

    run = dict(results.run)
    run.setdefault("wall_time_s", None)
    generated_at = _now_iso()

    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated_at,
        "kipcheck_version": kipcheck_version(),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0]},
        "run": run,
        "statement": build_statement(run, targets_out, kips_out, decided, catalog_path, generated_at,
                                     kipcheck_version()),
        "targets": targets_out,
        "summary": {
            "result": result,
            "banner": decided["banner"],
            "completeness": decided["completeness"],
            "tests": {v: test_counts.get(v, 0) for v in TEST_VERDICTS},
            "tests_total": len(rows),
            "timed_out": sum(1 for r in all_rows if r["timed_out"]),
            "requirements_total": len(catalogued),
            "requirements_tested": sum(1 for r in catalogued if r["tested"]),
            "requirements_untested": sum(1 for r in catalogued if not r["tested"]),
            "per_target": per_target_summary,
        },
        "kips": kips_out,
        "requirements": requirements_out,
        "non_passing": non_passing(all_rows, req_index),
        "self_checks": _self_checks(self_rows),
        "timeline": timeline(all_rows),
        "divergences": {"observed": observed, "register": list(register or [])},
        "deviations": {"register": deviation_register, "matched": matched},
        "tests_without_requirements": [
            {"nodeid": r["nodeid"], "target": r["target"], "verdict": r["verdict"], "reason": r["reason"]}
            for r in sorted(without_reqs, key=lambda r: (r["target"], r["nodeid"]))
        ],
        "uncatalogued_requirements": sorted(uncatalogued),
        "problems": problems,
    }


def _run_target(run: Mapping[str, Any], spec: str) -> Mapping[str, Any]:
    targets = run.get("targets")
    rec = targets.get(spec) if isinstance(targets, Mapping) else None
    return rec if isinstance(rec, Mapping) else {}


def _cell(counts: Mapping[str, int], result: str, narrowed: bool) -> dict[str, Any]:
    """Requirement verdict counts of one matrix cell and its word under the run outcome."""
    cell: dict[str, Any] = {v: counts.get(v, 0) for v in (*REQ_VERDICTS, OUT_OF_SCOPE)}
    cell["verdict"] = _outcome.cell_verdict(result, narrowed, kip_verdict(cell), cell)
    return cell


def _self_checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Tests that need no target (model checks, reference against itself): they vouch for
    kipcheck's own oracle, not for any cluster."""
    counts = Counter(r["verdict"] for r in rows)
    reqs = sorted({rid for r in rows for rid in r["requirements"]})
    return {
        "tests": {v: counts.get(v, 0) for v in TEST_VERDICTS},
        "tests_total": len(rows),
        "requirements": reqs,
        "rows": [{"nodeid": r["nodeid"], "verdict": r["verdict"], "reason": r["reason"] or None,
                  "requirements": r["requirements"]} for r in sorted(rows, key=lambda r: r["nodeid"])],
    }


def exit_code(report: Mapping[str, Any]) -> int:
    """0 pass or partial scope; 1 a failure on a finished run; 2 incomplete, not run, no
    results, or a target failed to start (infrastructure, not a verdict). See reports/outcome.py."""
    return _outcome.exit_code(report)


def build_report_from_dir(
    results_dir: str | Path,
    catalog_path: str | Path | None = None,
    register_path: str | Path | None = None,
    target_order: list[str] | None = None,
    deviations_path: str | Path | None = None,
) -> dict[str, Any]:
    results = read_results(results_dir)
    try:
        catalog = load_catalog_docs(catalog_path)
    except CatalogProblem as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()]
        first = "; ".join(lines[:3]) + (f"; ... and {len(lines) - 3} more" if len(lines) > 3 else "")
        results.problems.append(
            f"invalid requirement catalog ({len(lines)} problem(s): {first}); read without validation"
        )
        catalog = load_catalog_docs(catalog_path, strict=False)
    try:
        register = load_divergence_register(register_path)
    except Exception as exc:
        results.problems.append(f"divergence register unreadable: {exc}")
        register = []
    try:
        deviations = load_deviation_register(deviations_path)
    except Exception as exc:  # DeviationError lists every problem
        detail = "; ".join(getattr(exc, "problems", None) or [" ".join(str(exc).split())])
        results.problems.append(f"deviation register unreadable: {detail}")
        deviations = []
    if not catalog:
        results.problems.append("the requirement catalog is empty or missing")
    expected = EXPECTED_KIPS if catalog_path is None else ()
    allure = read_allure(Path(results_dir).parent / "allure-results")
    return build_report(results, catalog, register, target_order, expected, deviations, allure, catalog_path)


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_bytes(report_bytes(report))
    tmp.replace(p)
    return p


def report_bytes(report: Mapping[str, Any]) -> bytes:
    """The exact bytes of report.json (what its published SHA-256 is computed over)."""
    return (json.dumps(report, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")


def report_sha256(report: Mapping[str, Any]) -> str:
    return hashlib.sha256(report_bytes(report)).hexdigest()


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """Console summary: the outcome banner, then KIP rows x target columns with verdict
    words, requirement counts and the MUST-level counts."""
    summary = report["summary"]
    out = [summary.get("banner") or summary["result"].upper()]
    comp = summary.get("completeness") or {}
    if comp.get("text"):
        out.append(f"completeness: {comp['text']}")
    specs = [t["spec"] for t in report["targets"]]
    header = ["KIP"] + specs
    table = [header]
    for k in report["kips"]:
        line = [k["kip"]]
        for s in specs:
            c = k["per_target"][s]
            m = (k.get("must") or {}).get(s)
            line.append(
                f"{c['verdict']} ({c['pass']}/{c['fail']}/{c['not_supported']}"
                + (f"/{c['incomplete']}i" if c["incomplete"] else "")
                + f"/{c['untested'] + c.get(OUT_OF_SCOPE, 0)})"
                + (f" MUST {m['pass']}/{m['fail']}/{m['not_supported']}/{m['untested'] + m.get(OUT_OF_SCOPE, 0)}"
                   if m and k.get("must_total") else "")
            )
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    rows = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table]
    rows.insert(1, "  ".join("-" * w for w in widths))
    out += rows
    untested = "out of scope" if comp.get("narrowed") else "untested"
    out.append(f"(pass/fail/not supported[/incomplete]/{untested} requirements per target; MUST: the same for "
               "MUST-level requirements)")
    t = summary["tests"]
    timed = f", {summary['timed_out']} timed out" if summary.get("timed_out") else ""
    out.append(
        f"tests: {summary['tests_total']} "
        f"(pass {t['pass']}, fail {t['fail']}{timed}, error {t['error']}, "
        f"not supported {t['not_supported']}, skipped {t['skipped']}); "
        f"requirements: {summary['requirements_tested']} tested, "
        f"{summary['requirements_untested']} {untested} of {summary['requirements_total']}"
    )
    sc = report.get("self_checks") or {}
    if sc.get("tests_total"):
        st = sc["tests"]
        out.append(f"self-checks (no target, not a certification): {sc['tests_total']} "
                   f"(pass {st['pass']}, fail {st['fail'] + st['error']})")
    return out
