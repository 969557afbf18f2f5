"""The subcommands that start or front a cluster and run until SIGINT/SIGTERM: `kipcheck
broker` (the reference broker), `kipcheck target up` (any target spec) and `kipcheck record`
(the capture proxy in front of a real cluster). Each prints its address on its first line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any

from cli.common import EXIT_OK, UsageError, parse_specs
from replay.record_cmd import record
from targets.target_up import target_up


# ---------------------------------------------------------------------------------
# record


def cmd_record(args: argparse.Namespace) -> int:
    return record(
        args.upstream, args.listen, args.out, args.payloads,
        segment_max_bytes=args.segment_max_bytes,
        segment_max_seconds=args.segment_max_seconds,
        advertised_host=args.advertised_host,
        writer=args.writer,
        compact=not args.no_compact,
    )


# ---------------------------------------------------------------------------------
# broker


def cmd_broker(args: argparse.Namespace) -> int:
    if args.port and args.port + args.brokers - 1 > 65535:  # each bound alone: argparse (cli/main.py)
        raise UsageError(f"--port {args.port} is out of range for {args.brokers} broker(s)",
                         "node i listens on PORT+i-1; use a lower --port or 0")
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from reference_impl.server.broker_server import ReferenceCluster  # heavy (~0.5 s, every handler): only `broker` needs it
    except Exception as exc:
        raise UsageError(f"the reference broker cannot be loaded: {exc}") from None

    async def serve() -> None:
        cluster = ReferenceCluster(
            brokers=args.brokers, host=args.host, port=args.port, advertised_host=args.advertised_host
        )
        try:
            await cluster.start()
        except OSError as exc:  # port in use, bad address
            await _quiet_stop(cluster)
            raise UsageError(str(exc)) from None
        except Exception as exc:
            await _quiet_stop(cluster)
            raise UsageError(f"the reference broker failed to start: {type(exc).__name__}: {exc}") from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        print(f"bootstrap={cluster.bootstrap_servers}", flush=True)
        print(f"kipcheck reference broker: {args.brokers} node(s); stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
        try:
            await stop.wait()
        finally:
            await cluster.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:  # signal handler not installed (e.g. not the main thread)
        pass
    print("kipcheck reference broker stopped", file=sys.stderr, flush=True)
    return EXIT_OK


async def _quiet_stop(cluster: Any) -> None:
    with contextlib.suppress(Exception):
        for sock in list(getattr(cluster, "_sockets", {}).values()):
            sock.close()


# ---------------------------------------------------------------------------------
# target up


def cmd_target(args: argparse.Namespace) -> int:
    if args.target_command != "up":  # pragma: no cover - argparse enforces the choices
        raise UsageError(f"unknown target action {args.target_command!r}")
    spec = parse_specs([args.spec], option="SPEC")[0]
    return target_up(spec)  # one `kipcheck target: error:` line of its own when the target fails
