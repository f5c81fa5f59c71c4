"""What one materialisation costs the run's process when an op yields it, on a Dagster instance.

Run from the repo root (venv active)::

    python benchmarks/event_writes.py --events 300 --storage postgres --mode default
    python benchmarks/event_writes.py --events 300 --storage postgres --mode pool    # held connections
    python benchmarks/event_writes.py --events 300 --storage postgres --mode lean    # no stage list
    python benchmarks/event_writes.py --events 600 --storage postgres --steps 2      # two step processes

An op yields ``--events`` partitioned materialisations shaped like a batched run's (a record, a list of
stages) on a fresh instance (PostgreSQL: a throw-away database; SQLite: a temporary DAGSTER_HOME), and
prints the wall-clock and CPU time per event of the op's process. ``--steps K`` splits the events over K ops
run by Dagster's multiprocess executor (K step processes writing at once) and prints the run's whole
wall-clock per event too, to see whether step processes overlap the storage's waits. ``pool`` holds connections as the batch op
does (``DagsterInstance.optimize_for_webserver``); ``lean`` leaves the stage list out.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
import warnings
from typing import Any

import dagster as dg
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("SCRAPE_CONTRACTS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
STAGES = [{"stage": stage, "status": 200, "bytes": 45000, "elapsed_s": 0.012, "not_modified": False,
           "fields": {f"f{i}": {"selector": ".product-main .x", "matches": 1} for i in range(7)}}
          for stage in ("fetched", "extracted", "validated", "decided")]
RECORD = {f"f{i}": f"value {i} " * 3 for i in range(7)}


def build_job(events: int, mode: str, steps: int = 1) -> dg.JobDefinition:
    def materialise(context) -> Any:  # unannotated: Dagster refuses a string annotation (future import)
        if mode == "pool":
            context.instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=10)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(events):
            metadata: dict[str, Any] = {"outcome": "valid", "candidate_id": i, "version": 1,
                                        "url": dg.MetadataValue.url(f"http://127.0.0.1/{i}"),
                                        "record": dg.MetadataValue.json(RECORD)}
            if mode != "lean":
                metadata["stages"] = dg.MetadataValue.json(STAGES)
            yield dg.AssetMaterialization(asset_key="accepted", partition=f"p{context.op.name}-{i:05d}",
                                          metadata=metadata)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"{mode}: {events} events, {wall / events * 1000:.1f} ms wall and {cpu / events * 1000:.1f} ms "
              f"CPU each (load average {os.getloadavg()[0]:.1f})", flush=True)

    quiet = {"console": dg.colored_console_logger.configured({"log_level": "CRITICAL"})}

    ops = [dg.op(name=f"materialise_{k}", out={})(materialise) for k in range(steps)]
    executor = dg.multiprocess_executor if steps > 1 else dg.in_process_executor

    @dg.job(logger_defs=quiet, config={"loggers": {"console": {}}}, executor_def=executor)
    def event_writes() -> None:
        for op in ops:
            op()

    return event_writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--storage", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--mode", choices=["default", "pool", "lean"], default="default")
    parser.add_argument("--url-query", default="", help="appended to the PostgreSQL URL, e.g. "
                        "'options=-c%%20synchronous_commit%%3Doff' (a deployment's choice: the last commits may be "
                        "lost in a crash of the database server)")
    parser.add_argument("--steps", type=int, default=1, help="ops (step processes) sharing the events")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    home = tempfile.mkdtemp(prefix="sc-events-")
    database = f"sc_events_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    if args.storage == "postgres":
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
        url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{database}" + (f"?{args.url_query}" if args.url_query else "")
        with open(os.path.join(home, "dagster.yaml"), "w") as fh:
            fh.write(f"storage:\n  postgres:\n    postgres_url: {url}\n")
    os.environ["DAGSTER_HOME"] = home
    instance = dg.DagsterInstance.get()
    try:
        started = time.perf_counter()
        if args.steps == 1:
            build_job(args.events, args.mode).execute_in_process(instance=instance)
        else:  # the multiprocess executor starts each step in a process that rebuilds the job from here
            job = dg.build_reconstructable_job("event_writes", "build_job",
                                               (args.events // args.steps, args.mode, args.steps),
                                               reconstructor_working_directory=os.path.dirname(__file__))
            dg.execute_job(job, instance, raise_on_error=True)
        wall = time.perf_counter() - started
        print(f"run: {args.events} events in {args.steps} step(s), {wall:.2f} s, {wall / args.events * 1000:.1f} ms "
              "wall each, step starts included", flush=True)
    finally:
        instance.dispose()
        if args.storage == "postgres":
            with admin.connect() as conn:
                conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                     f"WHERE datname = '{database}'"))
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}"'))
        admin.dispose()


if __name__ == "__main__":
    main()
