"""The certification statement: what was certified, against which catalog, by which build.

Everything a receiver needs to know what a report claims, and to check that the report
and the catalog it was judged against are the ones named: the catalog hash is SHA-256
over the catalog YAML files concatenated in byte order of their names, i.e. what
``cat $(LC_ALL=C ls registers/catalog/*.yaml) | sha256sum`` prints. The rows themselves are
named by the evidence seal (reports/seal.py): its root, rows per worker file and per target.
"""

from __future__ import annotations

import hashlib
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any, Mapping

from registers.catalog import DEFAULT_CATALOG_DIR


def catalog_files(path: str | Path | None = None) -> list[Path]:
    """The catalog's YAML files in a stable (byte-wise name) order."""
    p = Path(path) if path is not None else DEFAULT_CATALOG_DIR
    if not p.exists():
        return []
    if p.is_file():
        return [p]
    return sorted((f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()),
                  key=lambda f: f.name.encode())


def catalog_sha256(files: list[Path]) -> str | None:
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()


def kipcheck_commit() -> str | None:
    """The git commit of the kipcheck checkout this code runs from (None when installed
    from a package, or git is missing)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    if out.returncode != 0 or len(sha) < 40:
        return None
    try:
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        dirty = ""
    return sha + ("-dirty" if dirty else "")


def client_versions() -> dict[str, str | None]:
    """confluent-kafka, the librdkafka it loads, and kio, as installed where this runs."""
    out: dict[str, str | None] = {"confluent_kafka": None, "librdkafka": None, "kio": None}
    try:
        import confluent_kafka  # optional client: may be missing or lack its shared library

        out["confluent_kafka"] = _first(confluent_kafka.version())
        out["librdkafka"] = _first(confluent_kafka.libversion())
    except Exception:  # noqa: BLE001 - not installed or no shared library
        pass
    try:
        out["kio"] = version("kio")
    except Exception:  # noqa: BLE001
        pass
    return out


def _first(v: Any) -> str:
    """confluent_kafka.version()/libversion() give (text, int); some builds give the text."""
    return str(v[0]) if isinstance(v, (tuple, list)) else str(v)


def target_facts(spec: str, run_targets: Any, described: Mapping[str, Any]) -> dict[str, Any]:
    """Cluster id, broker version and finalized features of one target: run.json's record
    first (the run side asked the cluster), then the plugin's target description."""
    rec = run_targets.get(spec) if isinstance(run_targets, Mapping) else None
    rec = rec if isinstance(rec, Mapping) else {}
    ff = rec.get("finalized_features") or described.get("finalized_features") or {}
    return {
        "spec": spec,
        "cluster_id": rec.get("cluster_id") or described.get("cluster_id"),
        "broker_version": rec.get("broker_version") or described.get("version"),
        "finalized_features": dict(ff),
        "bootstrap": rec.get("bootstrap") or described.get("bootstrap"),
        "security_protocol": rec.get("security_protocol") or described.get("security_protocol"),
        "nodes": described.get("nodes"),
    }


def build_statement(
    run: Mapping[str, Any],
    targets_out: list[Mapping[str, Any]],
    kips_out: list[Mapping[str, Any]],
    outcome: Mapping[str, Any],
    catalog_path: str | Path | None,
    generated_at: str,
    package_version: str,
    evidence: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The statement; `evidence` is what the seal of the rows says (reports/seal.py)."""
    files = catalog_files(catalog_path)
    kc = run.get("kipcheck") if isinstance(run.get("kipcheck"), Mapping) else {}
    commit = kc.get("commit") if kc else None
    commit = commit or kipcheck_commit()
    clients_rec = run.get("clients") if isinstance(run.get("clients"), Mapping) else None
    clients = dict(clients_rec) if clients_rec else client_versions()
    tested = ("pass", "fail", "not_supported", "incomplete")
    in_scope = [k["kip"] for k in kips_out if any(sum(c.get(v, 0) for v in tested)
                                                    for c in k["per_target"].values())]
    scope = run.get("scope") if isinstance(run.get("scope"), Mapping) else {}
    exclusions = []
    if outcome["completeness"]["narrowed"]:
        exclusions.append(f"selection narrowed to {outcome['completeness']['scope']}")
    if scope.get("deselected"):
        exclusions.append(f"{scope['deselected']} test(s) deselected")
    if outcome["completeness"]["timed_out"]:
        exclusions.append(f"{outcome['completeness']['timed_out']} test(s) timed out (counted as failures)")
    out_of_scope = [k["kip"] for k in kips_out if k["kip"] not in in_scope]
    if out_of_scope:
        exclusions.append("no test ran for " + ", ".join(out_of_scope))
    return {
        "targets": [target_facts(t["spec"], run.get("targets"), t) for t in targets_out],
        "kips_in_scope": in_scope,
        "catalog": {
            "version": f"catalog shipped with kipcheck {kc.get('version') or package_version}"
            + (f" at commit {commit[:12]}" if commit else ""),
            "sha256": catalog_sha256(files),
            "files": [f.name for f in files],
        },
        "kipcheck": {"version": (kc.get("version") if kc else None) or package_version, "commit": commit},
        "clients": clients,
        "clients_source": "run.json" if clients_rec else "report host (not recorded by the run)",
        "date": run.get("started_at") or generated_at,
        "duration_s": run.get("duration_s") if run.get("duration_s") is not None else run.get("wall_time_s"),
        "scope": outcome["completeness"]["scope"],
        "exclusions": exclusions,
        "completeness": outcome["completeness"]["text"],
        "evidence": dict(evidence or {}),
    }
