"""A bare TCP relay: asyncio, no decoding, no capture. The floor under the capture proxy's
added latency in benchmarks/proxy_bench.py: what one more Python process on the path costs
before the proxy does any work of its own.

    python -m benchmarks.bare_relay HOST:PORT [--listen PORT]   # prints "bare relay: listening H:P"

It does not rewrite Metadata, so a Kafka client goes around it to the brokers the cluster
advertises: single-socket workloads (raw ApiVersions and Produce) use it as it is, a client
library only in front of a broker that advertises the relay's port
(benchmarks/advertised_reference.py).
"""

from __future__ import annotations

import asyncio
import sys

READY = "bare relay: listening"
CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _serve(host: str, port: int, listen: int = 0) -> None:
    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(host, port)
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w), return_exceptions=True)

    server = await asyncio.start_server(relay, "127.0.0.1", listen)
    h, p = server.sockets[0].getsockname()[:2]
    print(f"{READY} {h}:{p}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    listen = "0"
    if len(argv) == 3 and argv[1] == "--listen":
        argv, listen = argv[:1], argv[2]
    host, _, port = (argv[0] if len(argv) == 1 else "").rpartition(":")
    if not host or not port.isdigit() or not listen.isdigit():
        print("usage: python -m benchmarks.bare_relay HOST:PORT [--listen PORT]", file=sys.stderr)
        return 2
    asyncio.run(_serve(host, int(port), int(listen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
