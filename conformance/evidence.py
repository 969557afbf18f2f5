"""Evidence on non-pass result rows: what a vendor needs to see why a test failed
without rerunning it: the assertion, the test's last raw-client exchanges, the
differential observation, and the tail of a local target's log.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Deque

from reference_impl.client import raw_client

MAX_EXCHANGES = 6
EXCERPT_CHARS = 1500
ASSERTION_CHARS = 2000
LOG_LINES = 40


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


class ExchangeRecorder:
    """Keeps the last MAX_EXCHANGES raw-client exchanges of the running test
    (registered in reference_impl.client.raw_client.EXCHANGE_OBSERVERS)."""

    def __init__(self) -> None:
        self.recent: Deque[dict[str, Any]] = collections.deque(maxlen=MAX_EXCHANGES)

    def __call__(self, client: Any, request: Any, response: Any) -> None:
        try:
            api_key = int(request.__api_key__)
            self.recent.append({
                "api": type(request).__name__.removesuffix("Request") or str(api_key),
                "api_key": api_key,
                "version": int(request.__version__),
                "node": f"{getattr(client, 'host', '?')}:{getattr(client, 'port', '?')}",
                "request": _excerpt(request),
                "response": _excerpt(response),
            })
        except Exception:  # noqa: BLE001 - evidence must never break a test
            pass

    def reset(self) -> None:
        self.recent.clear()

    def snapshot(self) -> list[dict[str, Any]]:
        return list(self.recent)


def install() -> ExchangeRecorder:
    recorder = ExchangeRecorder()
    raw_client.EXCHANGE_OBSERVERS.append(recorder)
    return recorder


# The plugin's one recorder: reset at each test's setup, read into its row's evidence.
RECORDER = install()


def log_tail(paths: list[Path], lines: int = LOG_LINES) -> tuple[list[str], str | None]:
    """The last lines of the most recently written log file among `paths` (dirs searched)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(f for f in p.rglob("*.log") if f.is_file())
        elif p.is_file():
            files.append(p)
    if not files:
        return [], None
    newest = max(files, key=lambda f: f.stat().st_mtime)
    try:
        with open(newest, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return [], str(newest)
    return text.splitlines()[-lines:], str(newest)


def build(assertion: str | None, exchanges: list[dict[str, Any]], divergences: list[Any],
          target: Any | None) -> dict[str, Any]:
    observation = None
    if divergences:
        last = divergences[-1]
        observation = _excerpt(last if isinstance(last, str) else getattr(last, "__dict__", last))[:ASSERTION_CHARS]
    tail: list[str] = []
    path = None
    if target is not None and getattr(target, "kind", None) != "external":
        try:
            tail, path = log_tail(list(target.log_paths()))
        except Exception:  # noqa: BLE001
            pass
    return {
        "assertion": (assertion or "")[:ASSERTION_CHARS] or None,
        "exchanges": exchanges,
        "observation": observation,
        "log_tail": tail,
        "log_path": path,
    }
