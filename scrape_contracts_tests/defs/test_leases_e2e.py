"""One scraper per target on a stock Dagster instance: real runs in separate OS processes, SIGSTOP/SIGCONT.

Dagster's own storage classes (SQLite files, or PostgreSQL) and nothing of this project's in
``dagster.yaml``: what keeps two runs of a target apart is the target lease in the project store. The site
holds a run's request until the test lets it go, so the test knows the run has taken its lease and is in
the middle of its fetch; a stopped run is stopped outside any store transaction (the test checks), and
every wait is on a condition (the site, the store, the process), never on a fixed time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.batch import batch_job_name
from scrape_contracts.defs.jobs import scrape_job_name
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.defs._lease_worker import failures, summary_skipped
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 180.0
SHORT_LEASE_S = "4"  # the stopped runs' leases: renewed every 1.3 s while they run, gone 4 s after a stop

CONTRACT = """
name: shop
targets:
  - url: {p1}
    key: p1
  - url: {p2}
    key: p2
fetch:
  adapter: http
  timeout_s: 120    # a held request is answered late, never timed out
  deadline_s: 240
  retries: 0
  allow_private_addresses: true
fields:
  title:
    selector: "#title"
  sku:
    selector: "#sku"
  price:
    selector: "#price"
    type: price
"""


class HeldPage:
    """A page whose first request waits until ``let_go``; the requests after it are answered at once."""

    def __init__(self, html: str) -> None:
        self.body = html.encode()
        self.arrived = threading.Event()
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._first = True

    def __call__(self, request: Request) -> Response:
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.arrived.set()
            self._go.wait(WAIT_S)
        return Response(200, self.body)

    def let_go(self) -> None:
        self._go.set()


@dataclass
class Worker:
    name: str
    run_id: str
    app: str
    process: subprocess.Popen
    result: Path
    log: Path


@dataclass
class Setup:
    backend: str
    db_url: str
    home: Path
    contracts_dir: Path
    instance: dg.DagsterInstance
    workers: list[Worker] = field(default_factory=list)

    @property
    def store(self) -> ProjectStore:
        return ProjectStore(self.db_url)

    def start(self, name: str, job: str, partitions: list[str], **env: str) -> Worker:
        run_id, app = str(uuid.uuid4()), f"sc_{name}"
        result, log = self.home.parent / f"{name}.json", self.home.parent / f"{name}.log"
        url = f"{self.db_url}?application_name={app}" if self.backend == "postgres" else self.db_url
        with log.open("wb") as out:  # a file, not a pipe nobody reads while the run logs
            process = subprocess.Popen(
                [sys.executable, "-m", "scrape_contracts_tests.defs._lease_worker", job, "--contracts-dir",
                 str(self.contracts_dir), "--partitions", *partitions, "--run-id", run_id, "--result", str(result)],
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "SCRAPE_CONTRACTS_DB_URL": url, **env},
                cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(name, run_id, app, process, result, log)
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.log.read_text(errors='replace')[-3000:]}" for w in self.workers
                         if w.log.exists())

    def wait_for(self, what: str, condition: Callable[[], Any], alive: list[Worker]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if any(w.process.poll() is not None for w in alive):
                raise AssertionError(f"a worker exited while waiting for {what}:\n{self.logs()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}:\n{self.logs()}")

    def finish(self, worker: Worker) -> dict[str, Any]:
        try:
            worker.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{worker.name} did not finish:\n{self.logs()}") from None
        assert worker.process.returncode == 0, self.logs()
        return json.loads(worker.result.read_text())

    def stop(self, worker: Worker) -> None:
        """SIGSTOP the worker at a moment it has no store transaction open (else every writer would wait)."""
        while True:
            os.killpg(worker.process.pid, signal.SIGSTOP)
            self.wait_for(f"{worker.name} to be stopped", lambda: _state(worker.process.pid) == "T", [worker])
            if not self._in_transaction(worker):
                return
            os.killpg(worker.process.pid, signal.SIGCONT)  # mid-renewal: let it finish, then try again
            time.sleep(0.05)

    def _in_transaction(self, worker: Worker) -> bool:
        if self.backend == "postgres":
            engine = sa.create_engine(self.db_url)
            try:
                with engine.connect() as conn:
                    return bool(conn.execute(sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :app AND state <> 'idle'"),
                        {"app": worker.app}).scalar())
            finally:
                engine.dispose()
        conn = sqlite3.connect(sa.engine.make_url(self.db_url).database, timeout=0)
        try:
            conn.execute("BEGIN IMMEDIATE")  # every store transaction takes the write lock (engines.py)
            conn.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()

    def run_single(self, partition: str) -> dg.ExecuteInProcessResult:
        job = build_definitions(self.contracts_dir).resolve_job_def(scrape_job_name("shop"))
        return job.execute_in_process(partition_key=partition, instance=self.instance, raise_on_error=False)

    def run_batch(self, partitions: list[str]) -> dg.ExecuteInProcessResult:
        job = build_definitions(self.contracts_dir).resolve_job_def(batch_job_name("shop"))
        return job.execute_in_process(run_config={"ops": {"shop_scrape_batch": {"config": {
            "partitions": partitions}}}}, instance=self.instance, raise_on_error=False)


def _state(pid: int) -> str:
    # /proc/<pid>/stat: "pid (name) state ..."; the name may hold spaces, the state follows its ")"
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture(params=["sqlite", "postgres"])
def setup(request: pytest.FixtureRequest, site: FixtureSite, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    config: dict[str, Any] = {"telemetry": {"enabled": False}}  # Dagster's own classes, nothing of ours
    if request.param == "postgres":
        db_url = request.getfixturevalue("pg_database")
        config["storage"] = {"postgres": {"postgres_url": db_url}}
    else:
        db_url = f"sqlite:///{home / 'scrape_contracts.db'}"
    (home / "dagster.yaml").write_text(json.dumps(config))  # JSON is YAML
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    (contracts_dir / "shop.yaml").write_text(textwrap.dedent(CONTRACT.format(p1=site.url("/p/1"),
                                                                             p2=site.url("/p/2"))))
    for name, value in {"DAGSTER_HOME": str(home), "SCRAPE_CONTRACTS_DB_URL": db_url,
                        "SCRAPE_CONTRACTS_ARTIFACTS_DIR": str(home / "artifacts"),
                        "SCRAPE_CONTRACTS_PARSE_WORKERS": "0"}.items():  # a batch is then one process
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SCRAPE_CONTRACTS_LEASE_SECONDS", raising=False)
    ProjectStore(db_url)  # the schema made once, before the processes open the store
    instance = dg.DagsterInstance.from_config(str(home))
    setup = Setup(request.param, db_url, home, contracts_dir, instance)
    try:
        yield setup
    finally:
        for worker in setup.workers:
            if worker.process.poll() is None:
                os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait(timeout=30)
        instance.dispose()
        engine = store_module._engines.pop(db_url, None)
        if engine is not None:
            engine.dispose()


def test_a_target_being_scraped_is_busy_for_every_other_run(setup: Setup, site: FixtureSite) -> None:
    held = HeldPage(product_page("Dune", "BK-1", "$10.00"))
    site.set_handler("/p/1", held)
    site.set_page("/p/2", product_page("Emma", "BK-2", "$20.00"))
    first = setup.start("first", "single", ["p1"])
    setup.wait_for("the first run to fetch p1", held.arrived.is_set, [first])
    lease = setup.store.lease("shop", "p1")
    assert lease.holder == first.run_id

    # a launch from the UI meanwhile: the run ends failed with the reason, having scraped nothing
    second = setup.run_single("p1")
    assert not second.success
    [reason] = failures(second)
    assert reason.startswith(f"busy: target shop/p1 is being scraped by run {first.run_id} until "), reason
    assert setup.store.candidates_of_run(second.run_id) == []
    # a scheduled batch meanwhile: it scrapes p2 and says in its summary why p1 was skipped
    batch = setup.run_batch(["p1", "p2"])
    assert batch.success
    assert [(s["partition"], s["reason"].split(" until ")[0]) for s in summary_skipped(batch)] == [
        ("p1", f"busy: target shop/p1 is being scraped by run {first.run_id}")]
    assert setup.store.latest_accepted("shop", "p2").run_id == batch.run_id
    assert len(site.requests_to("/p/1")) == 1  # only the run holding the lease fetched it

    held.let_go()
    assert setup.finish(first) == {"success": True, "failures": [], "skipped": []}, setup.logs()
    history = setup.store.accepted_history("shop", "p1")
    assert [(v.version, v.run_id) for v in history] == [(1, first.run_id)]
    assert not setup.store.lease("shop", "p1").live(setup.store.clock())  # released at the end
    assert setup.run_single("p1").success  # free for the next run at once


def test_a_run_stopped_past_its_lease_is_taken_over_and_its_late_commits_refused(setup: Setup,
                                                                              site: FixtureSite) -> None:
    pages = {"p1": HeldPage(product_page("Dune", "BK-1", "$10.00")),
             "p2": HeldPage(product_page("Emma", "BK-2", "$20.00"))}
    site.set_handler("/p/1", pages["p1"])
    site.set_handler("/p/2", pages["p2"])
    # a single-target run of p1 and a batch of p2, each paused in its fetch by SIGSTOP, past its lease
    single = setup.start("single", "single", ["p1"], SCRAPE_CONTRACTS_LEASE_SECONDS=SHORT_LEASE_S)
    batch = setup.start("batch", "batch", ["p2"], SCRAPE_CONTRACTS_LEASE_SECONDS=SHORT_LEASE_S)
    stopped = [single, batch]
    setup.wait_for("both runs to fetch", lambda: all(page.arrived.is_set() for page in pages.values()), stopped)
    store = setup.store
    stopped_at = {}
    for partition, worker in zip(pages, stopped):  # p1 by the single run, p2 by the batch
        setup.stop(worker)
        stopped_at[partition] = (worker.run_id, store.clock())
    # the bound on a hung worker (docs/limits.md): its targets are free at most one lease after it stopped,
    # since a stopped worker renews nothing (until then it renewed every third of the lease)
    lease_s = dt.timedelta(seconds=float(SHORT_LEASE_S))
    for partition, (run_id, at) in stopped_at.items():
        held = store.lease("shop", partition)
        assert held.holder == run_id and held.expires_at <= at + lease_s, (partition, held, at)
    setup.wait_for("both stopped runs' leases to expire", lambda: not any(
        store.lease("shop", p).live(store.clock()) for p in pages), [])

    # the next scheduled batch takes both targets over and accepts them
    takeover = setup.run_batch(["p1", "p2"])
    assert takeover.success and summary_skipped(takeover) == []
    assert {p: store.lease("shop", p).token for p in pages} == {"p1": 2, "p2": 2}

    for page in pages.values():
        page.let_go()
    for worker in stopped:
        os.killpg(worker.process.pid, signal.SIGCONT)
    taken_over = f"lease lost: run {takeover.run_id} took target shop/{{}} over at "
    # the single run fails at its next step, before it could record anything
    result = setup.finish(single)
    assert not result["success"]
    [reason] = result["failures"]
    assert reason.startswith(taken_over.format("p1")), reason
    # the batch's commit of p2 is refused by the store; the batch ends green and says so in its summary
    result = setup.finish(batch)
    assert result["success"]
    [skipped] = result["skipped"]
    assert skipped["partition"] == "p2" and skipped["reason"].startswith(taken_over.format("p2")), skipped

    # nothing accepted twice, and nothing of the stopped runs recorded
    for partition in pages:
        assert [(v.version, v.run_id) for v in store.accepted_history("shop", partition)] == [
            (1, takeover.run_id)], partition
        assert store.state("shop", partition).failure_streak == 0
    assert store.candidates_of_run(single.run_id) == [] and store.candidates_of_run(batch.run_id) == []
    assert setup.instance.get_run_by_id(single.run_id).status == dg.DagsterRunStatus.FAILURE


def _session_members(session: int) -> dict[int, str]:
    """The living processes of a session (pid → command line); a zombie has died, whoever is to reap it."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # gone meanwhile
        state, sid = fields[0], int(fields[3])
        if sid == session and state not in ("Z", "X"):
            members[int(entry.name)] = command
    return members


@pytest.mark.parametrize("setup", ["sqlite"], indirect=True)
def test_a_killed_batch_leaves_no_parse_worker_behind(setup: Setup, site: FixtureSite) -> None:
    # a batch of two targets: its fetching process (both pages in flight) and two parse worker processes,
    # started by a forkserver; the run's process is then SIGKILLed: they must notice and go, not wait for
    # their pages, then block for ever at exit on the queues nobody reads (orphans of init, ~120 MB each)
    pages = {"p1": HeldPage(product_page("Dune", "BK-1", "$10.00")),
             "p2": HeldPage(product_page("Emma", "BK-2", "$20.00"))}
    site.set_handler("/p/1", pages["p1"])
    site.set_handler("/p/2", pages["p2"])
    run = setup.start("batch", "batch", ["p1", "p2"], SCRAPE_CONTRACTS_PARSE_WORKERS="2")
    try:
        setup.wait_for("both pages to be fetched", lambda: all(p.arrived.is_set() for p in pages.values()),
                       [run])
        session = run.process.pid  # start_new_session: the run's pid is its session's id
        members = _session_members(session)
        forked = [pid for pid, command in members.items() if "multiprocessing.forkserver" in command]
        assert len(forked) == 4, members  # the forkserver, the fetching process and two parse workers

        run.process.send_signal(signal.SIGKILL)  # the run's process only, not its group
        run.process.wait(timeout=30)
        deadline = time.monotonic() + 30  # far beyond what a worker takes to see the end of its pipe
        while (left := _session_members(session)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == {}, f"outlived their run: {left}"
    finally:
        for page in pages.values():
            page.let_go()
        for pid in _session_members(run.process.pid):
            os.kill(pid, signal.SIGKILL)
