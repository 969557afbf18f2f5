"""What `kipcheck certify` wrote into --out, so the next run removes exactly that.

OUT/.kipcheck-manifest.json lists every file the run wrote (path relative to OUT, SHA-256
of what it wrote). Before a new run, each listed file that still holds those bytes is
deleted; a file someone changed or added is left alone. A report input under OUT/results
that the manifest does not account for (rows of an older run, a file someone put there) would
be read into the new report, so the run is refused instead of deleting it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator

from cli.common import UsageError
from reports import seal

MANIFEST = ".kipcheck-manifest.json"
# Folders whose new files are the run's (allure writes its own names into allure-results).
RUN_DIRS = ("results", "allure-results")
# Top-level files certify writes (report.json and report.html only with their --format).
RUN_FILES = ("report.json", "report.html", "pytest.log", "run.log", ".kipcheck-pytest.ini")
# What the report reads from OUT/results (reports/results.py): never left over from another run.
REPORT_INPUTS = (*seal.ROW_PATTERNS, *seal.DOC_PATTERNS, seal.SEAL_FILE)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def _listed(out: Path) -> dict[str, str]:
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc} (remove it, or choose another --out)") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise UsageError(f"{path} is not a kipcheck manifest (remove it, or choose another --out)")
    return {str(k): str(v) for k, v in files.items()}


def _inside(out: Path, rel: str) -> Path | None:
    """OUT/rel when it names a regular file inside OUT (never through a symlink)."""
    path = out / rel
    try:
        inside = path.resolve().is_relative_to(out.resolve()) and path.resolve() == path.absolute()
    except OSError:
        return None
    return path if inside and path.is_file() and not path.is_symlink() else None


def clear_previous(out: Path) -> set[Path]:
    """Delete the files the last run wrote (those that still hold its bytes); refuse a report
    input under OUT/results that kipcheck cannot account for. Returns the files left in the
    run folders (someone else's), which the new manifest will not claim."""
    for rel, digest in _listed(out).items():
        path = _inside(out, rel)
        if path is not None and _sha256(path) == digest:
            path.unlink()
    results = out / "results"
    stray = sorted({p.name for pat in REPORT_INPUTS for p in results.glob(pat) if p.is_file()})
    if stray:
        shown = ", ".join(stray[:3]) + (f" and {len(stray) - 3} more" if len(stray) > 3 else "")
        raise UsageError(f"{results} holds {shown}, not written by the last kipcheck run here (or changed since) "
                         "(move them away or choose another --out; kipcheck deletes only files it wrote)")
    return set(_run_files(out))


def _run_files(out: Path) -> Iterable[Path]:
    for name in RUN_DIRS:
        d = out / name
        if d.is_dir():
            yield from (p for p in d.rglob("*") if p.is_file() and not p.is_symlink())


def record(out: Path, kept: set[Path]) -> Path:
    """Write the manifest: every file in the run folders that was not there before the run
    (`kept`), and the top-level files certify writes."""
    files = [p for p in _run_files(out) if p not in kept]
    files += [out / name for name in RUN_FILES if (out / name).is_file()]
    listing = {p.relative_to(out).as_posix(): _sha256(p) for p in sorted(files)}
    path = out / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"written_by": "kipcheck certify", "files": listing}, indent=1) + "\n",
                   encoding="utf-8")
    tmp.replace(path)
    return path


@contextlib.contextmanager
def run_folder(out: Path) -> Iterator[None]:
    """Clear what the last run wrote in OUT, then list what this run writes, however it ends."""
    kept = clear_previous(out)
    try:
        yield
    finally:
        record(out, kept)
