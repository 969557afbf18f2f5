"""The three registers as the report model holds them: plain dicts, read through the
registers' own loaders (registers/catalog.py, divergences.py, deviations.py).

The catalog becomes one document per KIP in matrix order; a catalog that fails
validation is still shown, read without validation, and the caller records why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from registers.catalog import Catalog, Requirement, load_catalog, read_unvalidated
from registers.deviations import DEFAULT_DEVIATIONS, load_deviations
from registers.divergences import DEFAULT_REGISTER, load_register

# The matrix row of requirement ids tests use but the catalog does not list.
UNCATALOGUED = "(not in catalog)"


class CatalogProblem(ValueError):
    """The catalog could not be loaded or is invalid; the message lists why."""


def normalize_kip(kip: Any) -> str:
    """`98`, `kip98`, `KIP 98` -> `KIP-98`; anything else is kept as written."""
    text = str(kip).strip()
    m = re.fullmatch(r"(?i)(?:kip[\s_-]*)?(\d+)", text)
    if m:
        return f"KIP-{int(m.group(1))}"
    return text


def kip_sort_key(kip: str, status: str | None = None) -> tuple:
    """Matrix row order: KIP-98, KIP-447, KIP-848, draft round-trip, KIP-932, KIP-1289, PROTO, rest."""
    k = kip.upper()
    fixed = {"KIP-98": 0, "KIP-447": 1, "KIP-848": 1, "KIP-932": 3, "KIP-1289": 4}
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


def load_catalog_docs(path: str | Path | None = None, *, strict: bool = True) -> list[dict[str, Any]]:
    """The requirement catalog as a list of KIP documents (normalized plain dicts).

    `path` is a catalog directory (default: the packaged `registers/catalog`), read with
    the validating loader `registers.catalog.load_catalog`; with strict=False an invalid
    catalog is read as raw YAML instead (the caller records the problem).
    """
    try:
        return docs_from_catalog(load_catalog(path))
    except Exception as exc:  # CatalogError (ValueError) and friends
        if strict:
            raise CatalogProblem(str(exc)) from exc
    return load_catalog_yaml(path)


def docs_from_catalog(cat: Catalog) -> list[dict[str, Any]]:
    """A validated `registers.catalog.Catalog` -> KIP documents in matrix order (each of
    its requirements is listed by exactly one KIP document)."""
    docs = [
        {"kip": kip, "title": doc.title, "seed": doc.seed, "status": doc.status, "source": doc.file,
         "requirements": [_requirement_doc(cat.requirements[rid]) for rid in doc.requirement_ids]}
        for kip, doc in cat.kips.items()
    ]
    return sorted(docs, key=lambda d: kip_sort_key(d["kip"], d.get("status")))


def _requirement_doc(r: Requirement) -> dict[str, Any]:
    return {
        "id": r.id,
        "section": r.section,
        "level": r.level,
        "behaviour": r.behaviour,
        "oracle": r.oracle,
        "implemented_in": dict(r.implemented_in),
    }


def load_catalog_yaml(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read catalog YAML without validation (fallback for an invalid catalog)."""
    docs = []
    for file, data in read_unvalidated(path):
        items = data if isinstance(data, list) else [data]
        docs.extend(_normalize_kip_doc(d, str(file)) for d in items if isinstance(d, Mapping))
    return _merge_docs(docs)


def _normalize_kip_doc(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One unvalidated KIP document: requirements without an id are left out."""
    kip = normalize_kip(doc.get("kip") or Path(source).stem or "?")
    reqs = []
    for r in doc.get("requirements") or []:
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
    """Entries of registers/divergences.yaml as plain dicts ([] when the file is absent).

    Read with the validating loader `registers.divergences.load_register` (without a
    catalog: requirement ids are checked by the conformance tests); an invalid register
    raises its `RegisterError`, which the caller records as a problem.
    """
    p = Path(path) if path is not None else DEFAULT_REGISTER
    if not p.is_file():
        return []
    return [e.to_dict() for e in load_register(p)]


def load_deviation_register(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Entries of registers/deviations/ as plain dicts ([] when the file is absent).

    Read with the validating loader `registers.deviations.load_deviations` (without a
    catalog: requirement ids are checked by the conformance tests); an invalid register
    raises its `DeviationError`, which the caller records as a problem.
    """
    p = Path(path) if path is not None else DEFAULT_DEVIATIONS
    if not p.exists():
        return []
    return [d.to_dict() for d in load_deviations(p)]
