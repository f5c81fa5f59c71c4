"""Relay TCP connections from one address to another: ``python -m scrape_contracts.testing.forward
10.213.1.1:5432=127.0.0.1:5432 ...``. The network-namespace hosts reach PostgreSQL and RabbitMQ, which
listen on 127.0.0.1 only, through it (``netns.py``); neither server's configuration changes.

Prints ``listening`` once every address is bound; ends when its standard input closes (its owner died or
let it go), so a killed test leaves no relay behind.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

_CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # half-close so the other side sees the end; then close for good
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass
        writer.close()


async def _relay(to_host: str, to_port: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def _main(pairs: list[str]) -> None:
    servers = []
    for pair in pairs:
        listen, _, target = pair.partition("=")
        (host, port), (to_host, to_port) = _address(listen), _address(target)
        servers.append(await asyncio.start_server(
            lambda r, w, h=to_host, p=to_port: _relay(h, p, r, w), host, port, backlog=1024,
            reuse_address=True))
    print("listening", flush=True)
    loop = asyncio.get_running_loop()
    closed = loop.create_future()
    # nothing is ever written to it: readable means closed
    loop.add_reader(sys.stdin.fileno(), lambda: closed.done() or closed.set_result(None))
    await closed
    for server in servers:
        server.close()


def start(listen: str, to: str) -> subprocess.Popen:
    """A relay process from ``listen`` to ``to`` (``host:port`` each), once it listens. Killing it is a server
    gone away for its clients (their connections end, new ones are refused); ``start`` again brings it back."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    relay = subprocess.Popen([sys.executable, "-m", "scrape_contracts.testing.forward", f"{listen}={to}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert relay.stdout is not None
    if relay.stdout.readline().strip() != "listening":
        relay.kill()
        relay.wait(10)
        raise RuntimeError(f"the relay {listen} -> {to} did not start")
    return relay


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1:]))
