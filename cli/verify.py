"""`kipcheck verify DIR`: the receiver's check of a certification folder.

DIR is certify's --out folder (report.json, report.html, results/) or its results folder.
In order: the seal (results/seal.json) matches its own root; every sealed rows file, row
by row, and every sealed run file match it, and nothing was added; with --key, the seal's
Ed25519 signature is the key's; report.json's statement names this seal; report.json is
the report these rows rebuild to (only `generated_at` and `host` may differ: when and where
it was built); report.html names report.json's SHA-256. The first difference is one line on
stderr, exit 2; a genuine folder prints what was checked, exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from cli.common import EXIT_OK, UsageError, not_utf8
from reports import seal
from reports.certification import build_report_from_dir, report_bytes
from reports.statement import catalog_files, catalog_sha256
from reports.usage import non_empty_path

# What may differ between a report and its rebuild: when, and on which host, it was built.
BUILD_KEYS = ("generated_at", "host")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="DIR", type=non_empty_path,
                   help="certify's --out folder (holding results/), or its results folder")
    p.add_argument("--key", metavar="FILE", type=non_empty_path,
                   help="the vendor's Ed25519 public key (PEM): the seal must carry its signature")


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    results = folder / "results" if (folder / "results").is_dir() else folder
    if not results.is_dir():
        raise UsageError(f"{args.folder} is not a directory")
    try:
        lines = _verify(results, _read_key(args.key))
    except seal.SealError as exc:
        raise UsageError(f"{args.folder}: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(not_utf8(results)) from None
    for line in lines:
        print(line)
    return EXIT_OK


def _read_key(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --key {path}: {exc.strerror or exc}") from None


def _verify(results: Path, key: bytes | None) -> list[str]:
    sealed = seal.load(results)
    if sealed is None:
        raise seal.SealError(f"no {seal.SEAL_FILE}: the rows cannot be checked (kipcheck certify seals every run)")
    seal.check(results, sealed)
    workers = ", ".join(f"{name} {w['rows']}" for name, w in sealed["workers"].items()) or "none"
    targets = ", ".join(f"{t} {n}" for t, n in sealed["targets"].items()) or "none"
    out = [f"rows: {sealed['rows']} in {len(sealed['workers'])} worker file(s) ({workers}); per target: {targets}",
           f"files: {', '.join(sealed['files']) or 'none'}; run.json counts sha256 {sealed['run_counts_sha256']}",
           f"seal root: {sealed['root']} ({sealed['algorithm']})"]
    out.append(_signature_line(sealed, key))
    report_json = results.parent / "report.json"
    if report_json.is_file():
        out += _check_report(results, report_json, sealed)
    else:
        out.append(f"report.json: none beside {results} (the rows and run files were checked)")
    out.append("verified: the folder matches its seal")
    return out


def _signature_line(sealed: Mapping[str, Any], key: bytes | None) -> str:
    sig = sealed.get("signature")
    if key is not None:
        return f"signature: {seal.SIGNATURE}, made with the given key ({seal.check_signature(sealed, key)})"
    if sig:
        return (f"signature: {sig.get('algorithm')} by key {seal.fingerprint(sig.get('public_key', ''))}, not checked "
                "(pass --key with the vendor's public key to check who sealed it)")
    return "signature: none (the seal shows the folder is unchanged, not who sealed it)"


def _check_report(results: Path, report_json: Path, sealed: Mapping[str, Any]) -> list[str]:
    """report.json names this seal and is what the rows rebuild to; report.html names its hash."""
    data = report_json.read_bytes()
    try:
        original = json.loads(data)
    except ValueError as exc:
        raise seal.SealError(f"report.json is not JSON ({exc})") from None
    named = ((original.get("statement") or {}).get("evidence") or {}).get("root")
    if named != sealed["root"]:
        raise seal.SealError(f"report.json's statement names seal root {named or 'none'}, "
                             f"the results hold {sealed['root']}")
    cat = ((original.get("statement") or {}).get("catalog") or {}).get("sha256")
    here = catalog_sha256(catalog_files())
    if cat != here:
        raise seal.SealError(f"report.json was judged against catalog sha256 {cat}, this kipcheck has {here} "
                             "(verify with the kipcheck commit the statement names)")
    rebuilt = json.loads(report_bytes(build_report_from_dir(results)))
    where = _first_difference({k: v for k, v in original.items() if k not in BUILD_KEYS},
                              {k: v for k, v in rebuilt.items() if k not in BUILD_KEYS})
    if where:
        raise seal.SealError(f"report.json differs from the report its rows rebuild to at {where}")
    out = [f"report.json: names this seal and matches the report rebuilt from the rows "
           f"({original['summary']['result']}, {len(original['targets'])} target(s))"]
    html = results.parent / "report.html"
    if html.is_file():
        digest = hashlib.sha256(data).hexdigest()
        if digest not in html.read_text(encoding="utf-8", errors="replace"):
            raise seal.SealError(f"report.html does not name report.json's SHA-256 {digest}")
        out.append(f"report.html: names report.json's SHA-256 {digest}")
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first value that differs, e.g. ``summary.result ('pass' != 'fail')``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}{k} (only in {'report.json' if k in a else 'the rebuild'})"
            found = _first_difference(a[k], b[k], f"{path}{k}.")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path.rstrip('.')}[{i}].")
            if found:
                return found
        if len(a) != len(b):
            return f"{path.rstrip('.')} ({len(a)} entries in report.json, {len(b)} rebuilt)"
        return None
    if a != b:
        return f"{path.rstrip('.')} ({_short(a)} in report.json, {_short(b)} rebuilt)"
    return None


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 80 else text[:79] + "…"
