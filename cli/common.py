"""What the `kipcheck` subcommands share: exit codes, the usage error and its one-line format,
target spec parsing, the suites and plugin the CLI runs, and reading the catalog and results
of a run."""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Iterator, Sequence

from reports.certification import CatalogProblem, load_catalog_docs
from reports.usage import EXIT_USAGE, UsageError, usage_line
from targets.external import ENV_CONFIG
from targets.factory import create_target
from targets.target import TargetSpec, parse_target_spec, split_external_spec

EXIT_OK = 0
EXIT_FAILED = 1
__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "UsageError", "err", "warn", "running"]  # re-exported for the commands

SUITES_PACKAGE = "conformance.suites"
PLUGIN_MODULE = "conformance.plugin"

#: The subcommand being run (cli/main.py sets it), so that `err` names it.
_COMMAND: contextvars.ContextVar[str | None] = contextvars.ContextVar("kipcheck_command", default=None)


@contextlib.contextmanager
def running(command: str | None) -> Iterator[None]:
    """While `command` runs, `err` lines read ``kipcheck <command>: error: ...``."""
    token = _COMMAND.set(command)
    try:
        yield
    finally:
        _COMMAND.reset(token)


def err(what: str, hint: str | None = None) -> None:
    """One error line on stderr, in the format every command shares (reports/usage.py)."""
    print(usage_line(_COMMAND.get(), what, hint), file=sys.stderr, flush=True)


def warn(what: str) -> None:
    where = f"kipcheck {_COMMAND.get()}" if _COMMAND.get() else "kipcheck"
    print(f"{where}: warning: {what}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def parse_specs(specs: Sequence[str], option: str = "--target") -> list[str]:
    """Check every target spec before anything starts (syntax, option names, version, values:
    the provider is constructed, not started) and return them, client config paths made
    absolute."""
    absolute_client_config()
    out = []
    for s in specs:
        try:
            text = _absolute_config_option(parse_target_spec(s))
            create_target(parse_target_spec(text))
        except ValueError as exc:
            raise UsageError(f"bad {option} {s!r}: {exc}", "see docs/targets.md") from None
        except OSError as exc:  # a config= file that cannot be read
            raise UsageError(f"bad {option} {s!r}: {exc.strerror or exc}: {exc.filename}") from None
        if text in out:
            raise UsageError(f"{option} {text!r} given twice")
        out.append(text)
    return out


def absolute_client_config() -> None:
    """KIPCHECK_EXTERNAL_CONFIG is read relative to the directory the command was started in:
    pytest and its workers run in another one (certify pins their working directory)."""
    path = os.environ.get(ENV_CONFIG)
    if path and not os.path.isabs(path):
        os.environ[ENV_CONFIG] = os.path.abspath(path)


def _absolute_config_option(spec: TargetSpec) -> str:
    """The spec's text, an `external:...:config=REL` with REL made absolute (see
    absolute_client_config)."""
    if spec.kind != "external":
        return spec.raw
    path = split_external_spec(spec.option("bootstrap") or "")[1].get("config")
    if not path or os.path.isabs(path):
        return spec.raw
    return spec.raw.replace(f":config={path}", f":config={os.path.abspath(path)}", 1)


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
        warn(lines[0] + "\n" + "\n".join(shown) + (f"\n  ... and {more} more" if more > 0 else "")
             + "\n(read without validation)")
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
