"""A one-node reference broker whose Metadata advertises another port, for a bare relay
(benchmarks/bare_relay.py) listening there: behind the pair, a Kafka client's every
connection, not only its bootstrap, goes through the relay. benchmarks/proxy_bench.py times
confluent-kafka's produce round trip this way, the floor under the capture proxy's added
latency for a client library (the capture proxy rewrites Metadata itself; the bare relay
cannot).

    python -m benchmarks.advertised_reference PORT   # prints "bootstrap=HOST:BOUND_PORT",
                                                     # serves until SIGTERM or SIGINT
"""

from __future__ import annotations

import signal
import sys
import threading

from targets.factory import create_target

READY = "bootstrap="


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m benchmarks.advertised_reference PORT", file=sys.stderr)
        return 2
    target = create_target("reference")
    target.advertise_client_ports({n: int(argv[0]) for n in target.node_ids})
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    target.start()
    try:
        host, port = target.node_bind_address(target.node_ids[0])
        print(f"{READY}{host}:{port}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
