"""Chunk steps on real dagster-celery workers (RabbitMQ on 127.0.0.1:5672, the instance and the project store on
PostgreSQL): a worker SIGKILLed mid-chunk, and one frozen (SIGSTOP) until the broker hands its chunk to another.

Each test has its own Celery queue, so workers of other tests on the same broker never take its steps. The run
is executed by ``dagster job execute`` in a subprocess (the run's process, which sends the steps to Celery);
workers are ``dagster-celery worker start`` subprocesses, each stopped by its PID. Nothing waits on time: the
tests wait for rows in the store, requests at the site, processes and the run's status.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
import pytest
import yaml

from scrape_contracts.adapters.store import ProjectStore

from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BROKER = "pyamqp://guest:guest@127.0.0.1:5672//"
KEYS = [f"p{i:02d}" for i in range(24)]
FIRST = 6  # pages answered at once; the rest wait for the test (``gate``)
LEASE_S = 30  # a target's lease (SCRAPE_CONTRACTS_LEASE_SECONDS): a frozen worker's are free this long after
# How long a run may take to finish once a worker is gone: the broker's re-delivery, a new step process, the
# frozen worker's leases running out and the rest of the chunk. A bound against a hang, far above what it
# takes (under a minute alone); under a loaded suite the step's start-up alone has taken tens of seconds.
RUN_END_S = 300
# A page's time at the site (fetch.timeout_s, deadline_s): the held pages wait there from before the test sees
# the first targets accepted until it has stopped the worker, which on a loaded machine took more than 12 s
# (the held pages timed out, and were recorded failed, before the worker died); a dead or frozen worker's
# host slots lapse after it, so the other worker waits at most this long for them
PAGE_S = 40
# A bound against a hang for each wait below, far above what it takes alone (seconds): a run's `dagster job
# execute`, its plan and its step on a Celery worker took more than 50 s at a load of 20
WAIT_S = 180

pytestmark = pytest.mark.xdist_group("celery")


def _require_rabbitmq() -> None:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=2).close()
    except OSError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but RabbitMQ is not reachable at 127.0.0.1:5672")
        pytest.skip("RabbitMQ is not reachable at 127.0.0.1:5672")


def wait_for(what: str, condition: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Crew:
    """A DAGSTER_HOME on PostgreSQL, a code location with the contract on Celery, its workers and its run."""

    def __init__(self, tmp: Path, db_url: str, site: FixtureSite, heartbeat: int) -> None:
        self.tmp, self.db_url = tmp, db_url
        self.queue = f"scrape-test-{uuid.uuid4().hex[:8]}"
        self.home = tmp / "home"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text(yaml.safe_dump({
            "telemetry": {"enabled": False}, "storage": {"postgres": {"postgres_url": db_url}}}))
        contracts = tmp / "contracts"
        contracts.mkdir()
        targets = "".join(f"  - url: {site.url('/p/' + k)}\n    key: {k}\n" for k in KEYS)
        (contracts / "shop.yaml").write_text(
            f"name: shop\ntargets:\n{targets}fetch:\n  allow_private_addresses: true\n  timeout_s: {PAGE_S}\n  deadline_s: {PAGE_S}\n"
            "  concurrency: 4\nfields:\n  title:\n    selector: h1\n  price:\n    selector: .price\n"
            "    type: number\n")
        settings = {"task_default_queue": self.queue, "broker_heartbeat": heartbeat}
        self.code = tmp / "location.py"
        self.code.write_text(
            "from scrape_contracts import build_definitions\n"
            f"defs = build_definitions({str(contracts)!r}, executor={{'celery': {{'broker': {BROKER!r}, "
            f"'config_source': {settings!r}}}}})\n")
        # the worker's file, as deploy/celery_worker.yaml, on this broker and this test's queue
        shipped = yaml.safe_load((REPO / "deploy" / "celery_worker.yaml").read_text())
        config = shipped["execution"]["config"]
        config["broker"] = BROKER
        config["config_source"].update(settings)
        self.worker_yaml = tmp / "celery_worker.yaml"
        self.worker_yaml.write_text(yaml.safe_dump(shipped))
        self.env = {**os.environ, "DAGSTER_HOME": str(self.home), "SCRAPE_CONTRACTS_DB_URL": db_url,
                    "SCRAPE_CONTRACTS_PAGES": "store", "SCRAPE_CONTRACTS_PARSE_WORKERS": "1",
                    "SCRAPE_CONTRACTS_LEASE_SECONDS": str(LEASE_S),
                    "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                    "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.workers: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        self.run: subprocess.Popen[bytes] | None = None

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        worker = subprocess.Popen(
            [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(self.worker_yaml),
             "-q", self.queue, "-n", f"{name}-{self.queue}", "--", "--pool", "threads", "--concurrency", "1"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(worker)
        self.names.append(name)
        return worker

    def celery_of(self, worker: subprocess.Popen[bytes]) -> psutil.Process | None:
        """The celery process `dagster-celery worker start` runs (its child), once it has started."""
        children = psutil.Process(worker.pid).children()
        return children[0] if children else None

    def wait_ready(self, worker: subprocess.Popen[bytes], name: str) -> None:
        def ready() -> bool:
            assert worker.poll() is None, (self.tmp / f"{name}.log").read_text()[-2000:]
            return b"ready." in (self.tmp / f"{name}.log").read_bytes()

        wait_for(f"worker {name} ready", ready)

    def start_crew(self) -> None:
        """Workers a and b, ready, and the run started."""
        # Dagster's tables made here, once: two workers finding the database empty both created them, and one
        # died of it (psycopg2 DuplicateObject: type "run_tags" already exists)
        dg.DagsterInstance.from_config(str(self.home)).dispose()
        for name in ("a", "b"):
            self.start_worker(name)
        for name in ("a", "b"):
            self.wait_ready(self.workers[self.names.index(name)], name)
        self.execute()

    def observations(self, stage: str) -> list[dict[str, Any]]:
        """The run's observations of ``stage`` on scrape/shop/candidate, as (step, metadata)."""
        instance = dg.DagsterInstance.from_config(str(self.home))
        try:
            [run] = instance.get_runs(limit=1)
            found = []
            for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION):
                metadata = {k: getattr(v, "value", v) for k, v in entry.asset_observation.metadata.items()}
                if metadata.get("stage") == stage:
                    found.append({"step": entry.step_key, "partition": entry.asset_observation.partition,
                                  **metadata})
            return found
        finally:
            instance.dispose()

    def execute(self) -> None:
        (self.tmp / "run.yaml").write_text(yaml.safe_dump({"ops": {"shop_scrape_batch": {"config": {}}}}))
        self.run = subprocess.Popen(
            [str(BIN / "dagster"), "job", "execute", "-f", str(self.code), "-a", "defs", "-j",
             "scrape_shop_batch_job", "-c", str(self.tmp / "run.yaml")],
            env=self.env, stdout=open(self.tmp / "run.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True)

    def chunk_step_started(self) -> list[str]:
        """``chunk_workers``, once there is one; the run's log if the run ended before (not worth waiting)."""
        assert self.run is not None
        assert self.run.poll() is None, (self.tmp / "run.log").read_text()[-3000:]
        return self.chunk_workers()

    def chunk_workers(self) -> list[str]:
        """The workers the chunk step was given to, in order (dagster-celery's engine event names each)."""
        instance = dg.DagsterInstance.from_config(str(self.home))
        try:
            runs = instance.get_runs(limit=1)
            if not runs:
                return []
            names = []
            for entry in instance.all_logs(runs[0].run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
                event = entry.dagster_event
                if event is None or not (event.step_key or "").startswith("shop_scrape_chunk"):
                    continue
                worker = event.engine_event_data.metadata.get("Celery worker")
                if worker is not None:
                    names.append(str(worker.value).split("-", 1)[0])
            return names
        finally:
            instance.dispose()

    def worker_named(self, name: str) -> psutil.Process:
        celery = self.celery_of(self.workers[self.names.index(name)])
        assert celery is not None
        return celery

    def stop(self) -> None:
        for process in [*self.workers, *([self.run] if self.run else [])]:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)  # the group this test started for it
                except ProcessLookupError:
                    pass
                process.wait(timeout=30)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    released = threading.Event()
    yield released
    released.set()


@pytest.fixture
def site(gate: threading.Event) -> Iterator[FixtureSite]:
    with FixtureSite() as fixture_site:
        for i, key in enumerate(KEYS):
            page = product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00").encode()

            def answer(_request: Request, page: bytes = page, first: bool = i < FIRST) -> Response:
                if not first:
                    gate.wait(WAIT_S)  # held until the test has stopped a worker
                return Response(200, page)

            fixture_site.set_handler(f"/p/{key}", answer)
        yield fixture_site


def _versions(db_url: str) -> dict[str, int]:
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT partition, count(*) FROM sc_accepted WHERE contract = 'shop' "
                                        "GROUP BY partition")).all()
    finally:
        engine.dispose()
    return {partition: count for partition, count in rows}


@pytest.fixture
def crew_factory(tmp_path: Path, pg_database: str, site: FixtureSite) -> Iterator[Callable[[int], Crew]]:
    _require_rabbitmq()
    made: list[Crew] = []

    def make(heartbeat: int) -> Crew:
        crew = Crew(tmp_path, pg_database, site, heartbeat)
        made.append(crew)
        return crew

    yield make
    for crew in made:
        crew.stop()


@pytest.mark.timeout(RUN_END_S + 2 * WAIT_S)
def test_a_chunk_whose_worker_is_killed_is_finished_by_another_and_nothing_is_accepted_twice(
        crew_factory: Callable[[int], Crew], gate: threading.Event, pg_database: str) -> None:
    ProjectStore(pg_database)  # its tables, before anyone counts rows in them
    crew = crew_factory(10)
    crew.start_crew()
    [first] = wait_for("the chunk step on a worker", crew.chunk_step_started)
    # some targets committed by the first worker before it dies
    wait_for(f"{FIRST} accepted targets", lambda: len(_versions(pg_database)) >= FIRST)
    victim = crew.worker_named(first)
    victim.kill()
    victim.wait(timeout=30)
    gate.set()
    assert crew.run is not None
    assert crew.run.wait(timeout=RUN_END_S) == 0, (crew.tmp / "run.log").read_text()[-3000:]
    # the broker gave the chunk to the other worker, which finished it
    assert crew.chunk_workers() == [first, "b" if first == "a" else "a"]
    versions = _versions(pg_database)
    assert versions == {key: 1 for key in KEYS}  # every target accepted, and once


@pytest.mark.timeout(RUN_END_S + 2 * WAIT_S)
def test_a_frozen_worker_past_its_leases_is_refused_when_it_wakes_and_the_run_ends_green(
        crew_factory: Callable[[int], Crew], gate: threading.Event, pg_database: str) -> None:
    ProjectStore(pg_database)
    crew = crew_factory(2)  # a 2 s heartbeat: the broker gives a frozen worker's chunk away within seconds
    crew.start_crew()
    [first] = wait_for("the chunk step on a worker", crew.chunk_step_started)
    wait_for(f"{FIRST} accepted targets", lambda: len(_versions(pg_database)) >= FIRST)
    frozen = crew.worker_named(first)
    family = [frozen, *frozen.children(recursive=True)]  # its fetching and parsing processes too
    for process in family:
        process.send_signal(signal.SIGSTOP)
    try:
        gate.set()
        assert crew.run is not None
        assert crew.run.wait(timeout=RUN_END_S) == 0, (crew.tmp / "run.log").read_text()[-3000:]
        assert crew.chunk_workers() == [first, "b" if first == "a" else "a"]
        assert _versions(pg_database) == {key: 1 for key in KEYS}
    finally:
        for process in reversed(family):
            process.send_signal(signal.SIGCONT)
    # awake, the frozen attempt goes on and commits what it fetched: refused by the fencing tokens, said as
    # each target's lease_lost observation by its step, and nothing accepted twice
    refused = wait_for("the woken attempt's refusals", lambda: crew.observations("lease_lost"))
    assert {r["step"] for r in refused} == {"shop_scrape_chunk[chunk_0]"}
    assert all("took" in r["reason"] and "over" in r["reason"] for r in refused), refused[0]["reason"]
    assert _versions(pg_database) == {key: 1 for key in KEYS}
