"""`kipcheck replay DIR --target SPEC --out DIR2`: replay a recorded trace against a target.

The target spec is parsed by `targets.target.parse_target_spec`; `targets.factory.create_target`
starts it for the duration of the replay (an `external:` target is only probed). Exit
status: 0 every recorded exchange was replayed without problems; 1 some exchanges could
not be replayed or the target's answers broke the replay (unmapped ids, closed
connections, retries exhausted; see the printed summary and DIR2/replay_report.json);
2 error (missing/corrupt trace, unusable output directory, unreachable target).
"""

from __future__ import annotations

import argparse
import sys

from replay.replayer import REPORT_FILE, ReplayError, Replayer
from replay.trace_reader import TraceError
from reports.usage import non_empty_path, positive_float, positive_int, usage_line
from targets.factory import create_target
from targets.target import TargetError, parse_target_spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="DIR", help="recorded trace directory (kipcheck record --out)")
    parser.add_argument("--target", required=True, metavar="SPEC",
                        help="target to replay against, e.g. reference, kafka-native:4.4.0, external:HOST:PORT")
    parser.add_argument("--out", required=True, metavar="DIR2", type=non_empty_path,
                        help=f"new trace directory (+ {REPORT_FILE})")
    parser.add_argument("--pace", choices=("fast", "recorded"), default="fast",
                        help="fast: as fast as causal order allows (default); recorded: keep the recorded gaps")
    parser.add_argument("--max-attempts", type=positive_int(1000), default=8,
                        help="attempts per request when the target answers a retriable error (default 8)")
    parser.add_argument("--request-timeout", type=positive_float(3600), default=30.0,
                        help="seconds to wait for one response (0 < S <= 3600)")
    parser.add_argument("--lenient", action="store_true",
                        help="skip corrupt completed segments (reported) instead of failing")


def _error(what: str) -> int:
    print(usage_line("replay", what), file=sys.stderr, flush=True)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        spec = parse_target_spec(args.target)
    except ValueError as exc:
        return _error(f"bad --target {args.target!r}: {exc}")
    replayer = Replayer(args.trace, args.out, pace=args.pace, max_attempts=args.max_attempts,
                        request_timeout_s=args.request_timeout, strict_trace=not args.lenient)
    try:
        plan = replayer.load()  # bad input fails before a target is started
    except (TraceError, ReplayError, OSError) as exc:
        return _error(str(exc))
    if plan.total == 0 and not plan.gaps:
        return _error(f"{args.trace} holds no recorded exchange (is it a `kipcheck record --out` directory?)")
    try:
        target = create_target(spec)
        target.start()
    except (TargetError, OSError, RuntimeError, ValueError) as exc:
        return _error(f"target {args.target} unusable: {exc}")
    try:
        report = replayer.run(target.bootstrap_servers, target.name)
    except (ReplayError, OSError) as exc:
        return _error(str(exc))
    finally:
        target.stop()
    print(report.summary(), flush=True)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kipcheck replay", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
