"""`kipcheck compact TRACE_DIR [--out DIR] [--buckets N]`: write a trace's schema-3 layout.

The compacted trace (replay/compact.py, docs/traces.md "Schema version 3") is what
`kipcheck diff` joins bucket by bucket on Spark, and its event table what `kipcheck check`
replays bucket by bucket on Spark (replay/compact_events.py); every other command reads it
as it reads the recording. Exit 0 and one line saying where it went; bad input (missing directory,
corrupt segment, unknown schema version, already compacted, a non-empty --out): one line
on stderr and exit 2. The input is never modified.
"""

from __future__ import annotations

import argparse
import sys

from replay import compact as cp
from replay import trace_reader as tr
from reports.usage import non_empty_path, positive_int, usage_line

EXIT_OK, EXIT_ERROR = 0, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace_dir", metavar="TRACE_DIR", type=non_empty_path, help="trace directory written by kipcheck record")
    p.add_argument("--out", type=non_empty_path, metavar="DIR",
                   help="where the compacted trace goes (default: TRACE_DIR.v3; must not exist or be empty)")
    p.add_argument("--buckets", type=positive_int(4096), default=cp.DEFAULT_BUCKETS,
                   help=f"bucket files, the parallelism of a diff and of a check (default {cp.DEFAULT_BUCKETS})")


def run(args: argparse.Namespace) -> int:
    try:
        result = cp.compact(args.trace_dir, args.out, buckets=args.buckets)
    except (tr.TraceError, ValueError) as exc:
        print(usage_line("compact", str(exc)), file=sys.stderr, flush=True)
        return EXIT_ERROR
    print(f"kipcheck compact: {result.rows} row(s) ({result.exchanges} exchange(s)) in {result.buckets} bucket(s) "
          f"-> {result.out_dir} ({result.seconds:.1f} s)")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kipcheck compact", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
