"""`kipcheck target up SPEC`: start a target in the foreground until SIGINT/SIGTERM.

Output contract (stdout): the FIRST line is `bootstrap=HOST:PORT[,HOST:PORT...]`, flushed as
soon as the target is ready, so a wrapper can read one line and connect; a secured target
(`kafka-native:security=...`) prints `client_config=PATH` (its librdkafka-style properties
file) on the next line. Further
`key=value` lines describe the target (kind, version, nodes, startup time, log dir). On
SIGINT or SIGTERM the target is torn down and `stopped=SIGNAL` is printed.

Exit codes: 0 clean shutdown; 1 the teardown failed; 2 bad spec or the target did not start
(one line on stderr says why).

Also runnable without the CLI: `python -m targets.target_up SPEC`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

from reports.usage import usage_line
from targets.factory import create_target
from targets.target import NotSupportedByTarget

EXIT_OK = 0
EXIT_TEARDOWN_FAILED = 1
EXIT_START_FAILED = 2


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _emit(out: TextIO, line: str) -> None:
    try:
        print(line, file=out, flush=True)
    except (BrokenPipeError, ValueError):  # reader went away / stream closed
        pass


def _log_dir(target: Any) -> str:
    try:
        paths = target.log_paths()
    except Exception:  # noqa: BLE001
        paths = []
    if not paths:
        return "-"
    dirs = [str(p if p.is_dir() else p.parent) for p in paths]
    return os.path.commonpath(dirs) if len(dirs) > 1 else dirs[0]


def target_up(
    spec_text: str,
    out: TextIO = sys.stdout,
    err: TextIO | None = None,
    stop_event: threading.Event | None = None,
) -> int:
    """Start `spec_text`, print `bootstrap=...` first, serve until a signal, tear down.

    `stop_event` lets an in-process caller (tests) stop it without a signal; signal handlers
    are only installed when called from the main thread.
    """
    err = sys.stderr if err is None else err
    stop = stop_event or threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        # Only record it: calling stop.set() here would deadlock when the signal interrupts
        # the main thread inside stop.wait(), which holds the event's lock.
        received.append(signal.Signals(signum).name)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        try:
            target = create_target(spec_text)
        except Exception as exc:  # noqa: BLE001 - bad spec
            print(usage_line("target", f"bad target spec {spec_text!r}: {_one_line(exc)}", "see docs/targets.md"),
                  file=err, flush=True)
            return EXIT_START_FAILED
        try:
            target.start()
        except Exception as exc:  # noqa: BLE001 - any start failure, reported in one line
            kind = "not supported here" if isinstance(exc, NotSupportedByTarget) else "cannot start"
            print(usage_line("target", f"target {spec_text} {kind}: {_one_line(exc)}"), file=err, flush=True)
            try:
                target.stop()
            except Exception:  # noqa: BLE001
                pass
            return EXIT_START_FAILED

        try:
            _emit(out, f"bootstrap={target.bootstrap_servers}")
            props_path = getattr(target, "client_properties_path", None)
            if props_path:  # a secured target: the client settings it needs (KIPCHECK_EXTERNAL_CONFIG)
                _emit(out, f"client_config={props_path}")
            desc = target.describe()
            startup = target.startup_seconds
            _emit(out, f"kind={target.kind}")
            _emit(out, f"version={target.version or '-'}")
            _emit(out, f"nodes={len(target.node_ids)}")
            _emit(out, f"node_ids={','.join(str(n) for n in target.node_ids)}")
            _emit(out, f"startup_seconds={startup:.2f}" if startup is not None else "startup_seconds=-")
            _emit(out, f"log_dir={_log_dir(target)}")
            for key in ("mode", "image", "security_protocol", "cluster_id"):
                if desc.get(key):
                    _emit(out, f"{key}={desc[key]}")
            _emit(out, "ready (SIGINT or SIGTERM stops it)")
            while not received and not stop.is_set():
                time.sleep(0.2)
        finally:
            try:
                target.stop()
            except Exception as exc:  # noqa: BLE001
                print(usage_line("target", f"teardown of {spec_text} failed: {_one_line(exc)}"), file=err, flush=True)
                return EXIT_TEARDOWN_FAILED
        _emit(out, f"stopped={received[0] if received else 'requested'}")
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(usage_line("target", "expected one SPEC", "python -m targets.target_up SPEC"), file=sys.stderr)
        return EXIT_START_FAILED
    return target_up(args[0])


if __name__ == "__main__":
    sys.exit(main())
