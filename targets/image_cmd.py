"""`kipcheck image build [--kafka VERSION] [--rebuild]`: the apache/kafka image, without a registry.

Prints `image=apache/kafka:VERSION` and `source=present|loaded|pulled|built` (see
targets.kafka_image for the order tried). Exit 0 done; 2 bad version or no Docker engine /
build failure (one `kipcheck image: error: ...` line on stderr, reports/usage.py).
"""

from __future__ import annotations

import argparse
import sys
import time

from reports.usage import usage_line
from targets.docker_engine import ensure_engine
from targets.kafka_image import ensure_image
from targets.kafka_native.versions import resolve_release
from targets.target import NotSupportedByTarget, TargetError

EXIT_OK, EXIT_ERROR = 0, 2


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    sub = cmd.add_subparsers(dest="image_command", metavar="ACTION", parser_class=type(cmd))
    sub.required = True
    b = sub.add_parser("build", help="make apache/kafka:VERSION present: cache, registry, or an offline build",
                       description="Make apache/kafka:VERSION present in the Docker engine: load the cached "
                       "archive, else pull it from Docker Hub, else build it offline (debootstrap + Maven jars).")
    b.add_argument("--kafka", default=None, metavar="VERSION",
                   help="Kafka release or line (4.4.0, 4.1, 3.9; default: the newest supported)")
    b.add_argument("--rebuild", action="store_true", help="drop the image and its cached archive first; build offline")


def _error(message: str) -> int:
    print(usage_line("image", message.strip().splitlines()[0] if message.strip() else message), file=sys.stderr)
    return EXIT_ERROR


def run(args: argparse.Namespace) -> int:
    try:
        release = resolve_release(args.kafka)
    except ValueError as exc:
        return _error(str(exc))
    t0 = time.monotonic()
    try:
        ensure_engine()
        tag, source = ensure_image(release.version, rebuild=args.rebuild)
    except NotSupportedByTarget as exc:
        return _error(f"no Docker engine: {exc.reason}")
    except TargetError as exc:
        return _error(str(exc))
    print(f"image={tag}\nsource={source}\nseconds={time.monotonic() - t0:.1f}", flush=True)
    return EXIT_OK
