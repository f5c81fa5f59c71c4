"""Is the API still responsive with many open event streams? `scrape-contracts serve` on PostgreSQL.

    python benchmarks/sse_streams.py [--streams 200] [--seconds 30] [--pg postgresql://postgres@127.0.0.1:5432/postgres]

Makes a throw-away PostgreSQL database (Dagster's storage and the project store), starts `scrape-contracts
serve` on it with this repo's contracts, opens ``--streams`` event streams (`GET /events/stream`, each with
its own connection) and, while a writer records ~5 events a second that every stream receives, times
`GET /health/live` and `GET /contracts` one after the other for ``--seconds``. Prints p50/p95/max of each,
the events each stream received, and the CPU time the server used. Bounded: the run ends after
``--seconds`` (plus start-up), and the server and database are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

WRITER = """
import sys, time, dagster as dg
from scrape_contracts.defs.assets import candidate_key
deadline = time.monotonic() + float(sys.argv[1])
with dg.DagsterInstance.get() as instance:
    n = 0
    while time.monotonic() < deadline:
        instance.report_runless_asset_event(dg.AssetObservation(
            asset_key=candidate_key("books"), partition="dune", metadata={"stage": "probe", "n": n}))
        n += 1
        time.sleep(0.2)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _stream(port: int, token: str, counts: list[int], index: int, stop: asyncio.Event) -> None:
    """One event stream on its own connection, read until ``stop``; counts the events it receives."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /events/stream?contract=books HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        counts[index] = -1
        writer.close()
        return
    while not stop.is_set():
        try:
            line = await asyncio.wait_for(reader.readline(), 1.0)
        except asyncio.TimeoutError:
            continue
        if not line:
            break
        if line.startswith(b"event: trail"):
            counts[index] += 1
    writer.close()


def _probe(url: str, token: str, seconds: float, timings: dict[str, list[float]]) -> None:
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while time.monotonic() < deadline:
            for path in ("/health/live", "/contracts"):
                started = time.perf_counter()
                assert client.get(path).status_code == 200
                timings[path].append(time.perf_counter() - started)
            time.sleep(0.1)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    name = f"sc_bench_sse_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = args.pg.rsplit("/", 1)[0] + f"/{name}"
    home = Path(tempfile.mkdtemp(prefix="sse_bench_"))
    (home / "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {url}\ntelemetry: {{enabled: false}}\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "SCRAPE_CONTRACTS_DB_URL": url,
           "SCRAPE_CONTRACTS_API_MAX_STREAMS": str(max(500, args.streams + 10))}
    os.environ.update(env)
    server = store = None
    try:
        from scrape_contracts.adapters.store import ProjectStore
        from scrape_contracts.api.tokens import TokenStore

        store = ProjectStore(url)
        token = TokenStore(store.engine).create("data-team@example.com", "read")[1]
        port = _free_port()
        log = (home / "api.log").open("wb")
        server = subprocess.Popen([str(BIN / "scrape-contracts"), "--contracts-dir", str(REPO / "contracts"),
                                   "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        api = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{api}/health/live", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the API did not start: {(home / 'api.log').read_text()[-2000:]}")
            time.sleep(0.2)
        idle: dict[str, list[float]] = {"/health/live": [], "/contracts": []}
        _probe(api, token, 3, idle)  # warm, and the figures without streams
        counts = [0] * args.streams
        timings: dict[str, list[float]] = {"/health/live": [], "/contracts": []}

        async def run() -> float:
            stop = asyncio.Event()
            tasks = [asyncio.create_task(_stream(port, token, counts, i, stop)) for i in range(args.streams)]
            await asyncio.sleep(3)  # every stream connected and caught up
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(args.seconds)], env=env)
            cpu_before = _cpu_seconds(server.pid)
            probe = threading.Thread(target=_probe, args=(api, token, args.seconds, timings))
            probe.start()
            while probe.is_alive():
                await asyncio.sleep(0.2)
            cpu = _cpu_seconds(server.pid) - cpu_before
            writer.wait(timeout=60)
            await asyncio.sleep(2)  # the last events reach the streams
            stop.set()
            await asyncio.gather(*tasks)
            return cpu

        cpu = asyncio.run(run())
        refused = sum(1 for c in counts if c < 0)
        received = [c for c in counts if c >= 0]
        print(f"{args.streams} streams ({refused} refused), {args.seconds:.0f} s, PostgreSQL")
        for path in ("/health/live", "/contracts"):
            values, before = timings[path], idle[path]
            print(f"  {path:<13} p50 {statistics.median(values) * 1000:7.1f} ms  p95 {_pct(values, .95) * 1000:7.1f} ms"
                  f"  max {max(values) * 1000:7.1f} ms  ({len(values)} requests; without streams p50 "
                  f"{statistics.median(before) * 1000:.1f} ms)")
        print(f"  events per stream: min {min(received, default=0)}, median {statistics.median(received or [0]):.0f}, "
              f"max {max(received, default=0)}")
        print(f"  server CPU while measured: {cpu:.1f} s over {args.seconds:.0f} s ({cpu / args.seconds:.2f} cores)")
        return 0
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        if store is not None:
            store.engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


if __name__ == "__main__":
    sys.exit(main())
