"""What the `kipcheck` subcommands share: exit codes, the usage error, target spec parsing,
the suites and plugin the CLI runs, and reading the catalog and results of a run."""

from __future__ import annotations

import datetime as _dt
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Sequence

from reports.certification import CatalogProblem, load_catalog_docs
from targets.target import parse_target_spec

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

SUITES_PACKAGE = "conformance.suites"
PLUGIN_MODULE = "conformance.plugin"


class UsageError(Exception):
    """A bad argument or an infrastructure problem: print the message, exit 2."""


def err(msg: str) -> None:
    print(f"kipcheck: error: {msg}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def parse_specs(specs: Sequence[str]) -> list[str]:
    out = []
    for s in specs:
        try:
            parsed = parse_target_spec(s)
        except ValueError as exc:
            raise UsageError(f"bad --target {s!r}: {exc}") from None
        raw = parsed.raw or s
        if raw in out:
            raise UsageError(f"--target {raw!r} given twice")
        out.append(raw)
    return out


def plugin_registered() -> bool:
    """Is conformance.plugin registered as a pytest11 entry point (installed kipcheck)?"""
    try:
        return any(ep.value.split(":")[0] == PLUGIN_MODULE for ep in entry_points(group="pytest11"))
    except Exception:
        return False


def load_catalog_or_fail(path: str | None) -> list[dict[str, Any]]:
    """The catalog; an invalid one is read without validation after a warning."""
    if path is not None and not Path(path).is_dir():
        raise UsageError(f"catalog directory {path} does not exist")
    try:
        docs = load_catalog_docs(path)
    except CatalogProblem as exc:
        lines = str(exc).splitlines()
        shown = lines[1:6]
        more = len(lines) - 1 - len(shown)
        print(
            "kipcheck: warning: " + lines[0] + "\n" + "\n".join(shown)
            + (f"\n  ... and {more} more" if more > 0 else "")
            + "\n(read without validation)",
            file=sys.stderr,
            flush=True,
        )
        docs = load_catalog_docs(path, strict=False)
    if not docs:
        raise UsageError(f"the requirement catalog {path or '(packaged)'} is empty or missing")
    return docs


def not_utf8(results_dir: Path) -> str:
    """Name the results file that is not UTF-8 (rows are JSON lines, always UTF-8)."""
    for f in sorted(Path(results_dir).iterdir()):
        if f.is_file() and f.suffix in (".jsonl", ".ndjson", ".json"):
            try:
                f.read_bytes().decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"cannot read {f}: not UTF-8 text (byte {exc.start}); is it a kipcheck results file?"
    return f"cannot read the results in {results_dir}: a file is not UTF-8 text"
