"""What opening the project store costs in a fresh process, when its schema is already current.

    python benchmarks/store_open.py [--pg postgresql://postgres@127.0.0.1:5432/postgres] [--runs 15]

Each run is a new Python process (as a run worker is): it imports the store module, then opens the store
(engine + schema check) and times both. The store is created once beforehand. Prints the median of each
and whether Alembic was imported on the way (it should not be when the schema is current). Process start-up
is noisy on a busy machine: ``--in-process`` also opens the store 60 times in this process (a new engine
each time, first connection included) and prints the median, which is steadier.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PROBE = """
import json, sys, time
t0 = time.perf_counter()
from scrape_contracts.adapters.store import ProjectStore
t1 = time.perf_counter()
ProjectStore(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "alembic": "alembic" in sys.modules}))
"""


def _probe(url: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, url], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(label: str, url: str, runs: int) -> None:
    _probe(url)  # creates (or upgrades) the store
    samples = [_probe(url) for _ in range(runs)]
    open_ms = statistics.median(s["open_s"] for s in samples) * 1000
    import_ms = statistics.median(s["import_s"] for s in samples) * 1000
    alembic = sum(s["alembic"] for s in samples)
    print(f"{label}: open {open_ms:.1f} ms, import {import_ms:.0f} ms (median of {runs}); "
          f"alembic imported in {alembic}/{runs} runs")


def measure_in_process(label: str, url: str, runs: int = 60) -> None:
    from scrape_contracts.adapters import store

    def open_once() -> float:
        started = time.perf_counter()
        store.ProjectStore(url)
        elapsed = time.perf_counter() - started
        store._engines.pop(url).dispose()  # the next open is a first open again
        return elapsed

    open_once()
    median = statistics.median(open_once() for _ in range(runs)) * 1000
    print(f"{label}: open {median:.2f} ms in process (median of {runs})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", help="a PostgreSQL admin URL: a throw-away database is created there")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--in-process", action="store_true", help="also time opens inside this process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure("sqlite", f"sqlite:///{Path(tmp) / 'store.db'}", args.runs)
        if args.in_process:
            measure_in_process("sqlite", f"sqlite:///{Path(tmp) / 'store.db'}")
    if args.pg:
        import sqlalchemy as sa

        name = f"sc_bench_{uuid.uuid4().hex[:8]}"
        admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            measure("postgresql", args.pg.rsplit("/", 1)[0] + f"/{name}", args.runs)
            if args.in_process:
                measure_in_process("postgresql", args.pg.rsplit("/", 1)[0] + f"/{name}")
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
