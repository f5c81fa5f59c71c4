"""Races and crashes against the real store: threads, processes, two run workers, SIGKILLed runs.

The store promises that races are settled by the database (row locks, unique constraints, compare-and-swap),
not by hoping runs never meet. These tests make them meet: store calls released together from a barrier
(threads, and spawned processes), two real Dagster runs of one contract (a target each: two runs of one
target never both scrape it, test_leases_e2e) in separate processes held at the selector compare-and-swap
until both are there, and runs killed while their accept transaction waits on a lock the test holds. The locks are taken from the test, so production code has no test hooks.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts import read_accepted
from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.schema import partition_state
from scrape_contracts.adapters.store import ProjectStore, accepted, candidates, reviews
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.engine.extract import extract_record
from scrape_contracts_tests.conftest import PG_ADMIN_URL, PRODUCT_CONTRACT, product_page, require_postgres
from scrape_contracts_tests.defs import _worker
from scrape_contracts_tests.defs._worker import Outcome

# one pytest-xdist worker runs the whole module (the process crew is started once), among the first
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("concurrency")]

REPO_ROOT = Path(__file__).resolve().parents[2]
THREADS = 8
PROCESSES = 4
ITERATIONS = 12
# the pipeline tries a selector save 5 times and each conflict means another run's save committed, so up to 5
# concurrent healers of one contract always get through (deploy/dagster.postgres.yaml allows 4 runs a contract)
HEALERS = 4
WAIT_S = 60.0


# ---- helpers and fixtures for the store-level races -----------------------------------------------------
@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        yield request.getfixturevalue("pg_database")
        return
    url = f"sqlite:///{tmp_path / 'store.db'}"
    yield url
    engine = store_module._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


class ProcessCrew:
    """Long-lived spawned worker processes sharing one barrier; each imports dagster once (seconds)."""

    def __init__(self, size: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # no forked copies of this process's pools and threads
        self.size = size
        self.barrier = ctx.Barrier(size)
        self.inboxes = [ctx.Queue() for _ in range(size)]
        self.outbox = ctx.Queue()
        self.processes = [ctx.Process(target=_worker.crew_main, args=(w, self.inboxes[w], self.outbox, self.barrier),
                                      daemon=True, name=f"crew-{w}") for w in range(size)]
        self.broken = False
        self._ready = False
        for process in self.processes:
            process.start()

    def _collect(self, expected: str) -> list[Any]:
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = time.monotonic() + WAIT_S
        while len(results) + len(errors) < self.size:
            try:
                worker, kind, payload = self.outbox.get(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # queue.Empty: a worker hangs or died
                self.broken = True
                dead = [p.name for p in self.processes if not p.is_alive()]
                raise AssertionError(f"crew workers did not answer within {WAIT_S}s (dead: {dead})") from None
            if kind == "error":
                errors[worker] = payload
            else:
                assert kind == expected, (worker, kind, payload)
                results[worker] = payload
        if errors:
            self.broken = True  # the barrier was aborted: start afresh next time
            # the worker that failed first, not the ones it released from the barrier
            first = sorted(errors.items(), key=lambda item: "BrokenBarrierError" in item[1])
            raise AssertionError("\n".join(f"crew worker {w} failed:\n{text}" for w, text in first))
        return [results[w] for w in range(self.size)]

    def run(self, scenario: str, url: str, spec: dict[str, Any]) -> list[list[Outcome]]:
        if not self._ready:
            self._collect("ready")
            self._ready = True
        for inbox in self.inboxes:
            inbox.put((scenario, url, spec))
        return self._collect("done")

    def close(self) -> None:
        for inbox in self.inboxes:
            try:
                inbox.put(None)
            except Exception:  # noqa: BLE001 (closing anyway)
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


@pytest.fixture(scope="module")
def crew_holder(request: pytest.FixtureRequest) -> Iterator[dict[str, ProcessCrew]]:
    holder: dict[str, ProcessCrew] = {}
    # started now, so the workers import while the thread races run, when any selected test needs them
    if any("Processes" in item.nodeid or "fresh_store" in item.nodeid for item in request.session.items):
        holder["crew"] = ProcessCrew(PROCESSES)
    yield holder
    if "crew" in holder:
        holder["crew"].close()


def crew(holder: dict[str, ProcessCrew]) -> ProcessCrew:
    current = holder.get("crew")
    if current is None or current.broken:
        if current is not None:
            current.close()
        holder["crew"] = current = ProcessCrew(PROCESSES)
    return current


def race(mode: str, scenario: str, url: str, spec: dict[str, Any],
         holder: dict[str, ProcessCrew]) -> list[list[Outcome]]:
    """Every worker's outcomes (outer list: worker, inner: iteration); each iteration starts on a barrier."""
    if mode == "processes":
        return crew(holder).run(scenario, url, spec)
    barrier = threading.Barrier(THREADS)
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(_worker.run_scenario, scenario, url, spec, w, barrier) for w in range(THREADS)]
        errors = [e for e in (f.exception(timeout=WAIT_S) for f in futures) if e is not None]
    # the worker that failed first, not the ones it released from the barrier
    errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


def by_iteration(outcomes: list[list[Outcome]]) -> list[list[Outcome]]:
    return [list(column) for column in zip(*outcomes, strict=True)]


def add_candidate(store: ProjectStore, partition: str, contract: str = "shop", record: dict | None = None) -> int:
    return store.add_candidate(
        contract=contract, partition=partition, run_id="setup", url=f"http://127.0.0.1/{partition}",
        record=record or {"title": "Dune"}, outcome="valid", details={}, page_sha256=None, selector_version=1,
    ).id


def rows(store: ProjectStore, query: Any) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(query).all())


# ---- store-level races ----------------------------------------------------------------------------------
class _StoreRaces:
    """Each race on PostgreSQL and SQLite; the subclasses run the workers as threads or as processes."""

    mode: str

    @property
    def workers(self) -> int:
        return THREADS if self.mode == "threads" else PROCESSES

    def test_same_candidate_accepted_by_many_workers_exactly_once(self, store_url: str, crew_holder: Any) -> None:
        store = ProjectStore(store_url)
        ids = [add_candidate(store, f"same{i}") for i in range(ITERATIONS)]
        outcomes = race(self.mode, "accept_same", store_url, {"iterations": ids}, crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            assert sorted(kind for kind, _ in column) == ["AlreadyAccepted"] * (len(column) - 1) + ["ok"], column
            [winner] = [w for w, (kind, _) in enumerate(column) if kind == "ok"]
            [row] = rows(store, sa.select(accepted).where(accepted.c.candidate_id == ids[i]))
            assert (row.version, row.run_id, row.partition) == (1, f"w{winner}-i{i}", f"same{i}")
            assert store.candidate(ids[i]).status == "accepted"
        assert len(rows(store, sa.select(accepted))) == ITERATIONS

    def test_different_candidates_of_one_partition_get_consecutive_versions(self, store_url: str,
                                                                             crew_holder: Any) -> None:
        store = ProjectStore(store_url)
        plan = [[add_candidate(store, f"many{i}", record={"n": w}) for w in range(self.workers)]
                for i in range(ITERATIONS)]
        outcomes = race(self.mode, "accept_distinct", store_url, {"iterations": plan}, crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            assert all(kind == "ok" for kind, _ in column), column
            history = store.accepted_history("shop", f"many{i}")
            assert [v.version for v in history] == list(range(1, self.workers + 1))
            # one version per candidate, and the version each worker was told is the one stored
            assert sorted(v.candidate_id for v in history) == sorted(plan[i])
            assert {v.candidate_id: v.version for v in history} == {
                plan[i][w]: column[w][1] for w in range(self.workers)}
            assert store.latest_accepted("shop", f"many{i}").version == self.workers

    def test_selector_compare_and_swap_has_one_winner(self, store_url: str, crew_holder: Any) -> None:
        store = ProjectStore(store_url)
        base = {"f0": "#old0"}
        plan = []
        for i in range(ITERATIONS):
            assert store.current_selectors(f"cas{i}", base).version == 1
            plan.append({"contract": f"cas{i}", "parent": 1, "base": base})
        outcomes = race(self.mode, "selector_cas", store_url, {"iterations": plan}, crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            assert sorted(kind for kind, _ in column) == ["SelectorConflict"] * (len(column) - 1) + ["ok"], column
            [winner] = [w for w, (kind, _) in enumerate(column) if kind == "ok"]
            history = store.selector_history(f"cas{i}")
            assert [(v.version, v.parent_version) for v in history] == [(1, None), (2, 1)]
            assert history[1].selectors == {"f0": f"#won-by-w{winner}"}
            assert history[1].run_id == f"w{winner}-i{i}"

    def test_concurrent_heals_of_different_fields_lose_no_selector_version(self, store_url: str,
                                                                           crew_holder: Any) -> None:
        """Runs healing different fields of one contract, saving with the pipeline's reload-and-layer retry."""
        store = ProjectStore(store_url)
        contracts = [f"healers{i}" for i in range(ITERATIONS)]
        for name in contracts:
            loaded = _worker.heal_contract(name, HEALERS)
            assert store.current_selectors(name, loaded.contract.selectors()).version == 1
        outcomes = race(self.mode, "heal_retry", store_url, {"iterations": contracts, "fields": HEALERS},
                        crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            healers = column[:HEALERS]
            assert all(kind == "ok" for kind, _ in healers), healers
            history = store.selector_history(contracts[i])
            assert [v.version for v in history] == list(range(1, HEALERS + 2))
            # an unbroken chain: each version was layered on the one before it
            assert [v.parent_version for v in history] == [None, *range(1, HEALERS + 1)]
            assert sorted(outcome["version"] for _, outcome in healers) == list(range(2, HEALERS + 2))
            healed_in: dict[str, int] = {}
            for version in history[1:]:
                [fieldname] = version.changes
                healed_in[fieldname] = version.version
                # no heal saved earlier is missing from a later version
                for earlier in healed_in:
                    assert version.selectors[earlier] == f"#new{earlier[1:]}", (version.version, version.selectors)
            assert sorted(healed_in) == [f"f{k}" for k in range(HEALERS)]
            assert history[-1].selectors == {f"f{k}": f"#new{k}" for k in range(HEALERS)}

    def test_accept_and_reject_of_one_quarantined_candidate_record_one_decision(self, store_url: str,
                                                                                crew_holder: Any) -> None:
        store = ProjectStore(store_url)
        plan = []
        for i in range(ITERATIONS):
            partition = f"review{i}"
            candidate_id = add_candidate(store, partition)
            store.quarantine(candidate_id, "price jumped")
            # half pin the candidate (a reviewer looked at it), half decide on whatever is quarantined
            plan.append({"contract": "shop", "partition": partition,
                         "candidate_id": candidate_id if i % 2 else None})
        outcomes = race(self.mode, "decide", store_url, {"iterations": plan}, crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            partition = plan[i]["partition"]
            winners = [(w, payload) for w, (kind, payload) in enumerate(column) if kind == "ok"]
            assert len(winners) == 1, column
            losers = {kind for kind, _ in column if kind != "ok"}
            assert losers == {"Superseded" if plan[i]["candidate_id"] else "NothingToReview"}, column
            [(winner, (decision, version))] = winners
            [review] = rows(store, sa.select(reviews).where(reviews.c.partition == partition))
            assert (review.decision, review.reviewer) == (decision, f"w{winner}")
            accepted_rows = rows(store, sa.select(accepted).where(accepted.c.partition == partition))
            cand = store.candidate(review.candidate_id)
            if decision == "accept":
                assert [(r.version, r.candidate_id, r.source) for r in accepted_rows] == [(1, cand.id, "review")]
                assert version == 1 and cand.status == "accepted"
            else:
                assert accepted_rows == [] and version is None and cand.status == "rejected"
            assert store.pending_review("shop", partition) is None
            assert not store.state("shop", partition).paused

    def test_quarantine_racing_a_newer_accept_leaves_nothing_paused(self, store_url: str, crew_holder: Any) -> None:
        """Two overlapping runs: the older one's candidate needs review, the newer one's is accepted."""
        store = ProjectStore(store_url)
        plan = [{"older": add_candidate(store, f"overlap{i}", record={"price": 900}),
                 "newer": add_candidate(store, f"overlap{i}", record={"price": 100})} for i in range(ITERATIONS)]
        outcomes = race(self.mode, "quarantine_vs_accept", store_url, {"iterations": plan}, crew_holder)
        for i, column in enumerate(by_iteration(outcomes)):
            # whichever committed first, the older candidate ends superseded and nothing waits for review
            assert column[0] in (("ok", "quarantined"), ("ok", "superseded")) and column[1] == ("ok", 1), column
            assert store.candidate(plan[i]["older"]).status == "superseded"
            assert store.candidate(plan[i]["newer"]).status == "accepted"
            assert store.pending_review("shop", f"overlap{i}") is None
            assert not store.state("shop", f"overlap{i}").paused, store.state("shop", f"overlap{i}")


    def test_overlapping_chunks_count_every_failure_once(self, store_url: str, crew_holder: Any) -> None:
        """Batches committing chunks over the same targets (half of them new): the partition locks keep every
        failure streak's read-modify-write whole, and no two chunks deadlock."""
        store = ProjectStore(store_url)
        targets = 40
        plan = [{"contract": f"chunks{i}", "targets": targets} for i in range(ITERATIONS)]
        for item in plan:
            for k in range(0, targets, 2):  # the others are first seen by the racing chunks
                store.update_state(item["contract"], f"t{k}", heal_attempts=0)
        outcomes = race(self.mode, "record_chunks", store_url, {"iterations": plan}, crew_holder)
        outbox = store.outbox()
        for i, column in enumerate(by_iteration(outcomes)):
            assert all(kind == "ok" for kind, _ in column), column
            contract = plan[i]["contract"]
            states = store.states(contract)
            assert sorted(states) == sorted(f"t{k}" for k in range(targets))
            counts = dict(rows(store, sa.select(partition_state.c.partition, partition_state.c.failure_count)
                               .where(partition_state.c.contract == contract)))
            events = [row for row in outbox.after(0, limit=100_000) if row.contract == contract]
            for k in range(targets):
                plans = [_worker.chunk_plan(w, k) for w in range(self.workers)]
                failures = plans.count("reject") + plans.count("fail")
                state = states[f"t{k}"]
                assert counts[f"t{k}"] == failures, (k, plans, counts[f"t{k}"])
                # each failure its own event, numbered 1..n: a lost update would number two alike
                assert sorted(e.version for e in events if e.partition == f"t{k}" and e.kind == "failed") == \
                    list(range(1, failures + 1)), (k, plans)
                if "unchanged" in plans:
                    assert state.etag in {f"w{w}-t{k}" for w, p in enumerate(plans) if p == "unchanged"}
                    assert state.last_success_at is not None


class TestStoreRacesInThreads(_StoreRaces):
    mode = "threads"


def test_stale_quarantine_and_stale_decision_settle_the_partition(store_url: str) -> None:
    """The interleavings of overlapping runs, one at a time: nothing stays paused for a moot review."""
    store = ProjectStore(store_url)
    # a quarantine landing after a newer candidate was accepted
    older, newer = add_candidate(store, "a"), add_candidate(store, "a")
    store.accept(newer, run_id="run-2")
    assert store.quarantine(older, "price jumped").status == "superseded"
    assert not store.state("shop", "a").paused
    with pytest.raises(store_module.NothingToReview):
        store.decide("shop", "a", "accept", reviewer="alice", reason="looked at it")
    with pytest.raises(store_module.Superseded):
        store.decide("shop", "a", "accept", reviewer="alice", reason="looked at it", candidate_id=older)

    # ... or after a newer candidate was quarantined: the reviewer must see the newer one
    older, newer = add_candidate(store, "b"), add_candidate(store, "b")
    store.quarantine(newer, "price jumped")
    assert store.quarantine(older, "price jumped").status == "superseded"
    assert store.pending_review("shop", "b").id == newer
    assert store.state("shop", "b").paused

    # a decision on a candidate that newer accepted data overtook is refused, and the refusal sticks
    older, newer = add_candidate(store, "c"), add_candidate(store, "c")
    store.accept(newer, run_id="run-2")
    store.set_candidate_status(older, "quarantined")  # as left by a store without the check above
    store.update_state("shop", "c", paused=True, pause_reason=f"{store_module.REVIEW_PAUSE}: price jumped")
    with pytest.raises(store_module.Superseded):
        store.decide("shop", "c", "accept", reviewer="alice", reason="looked at it", candidate_id=older)
    assert store.candidate(older).status == "superseded"
    assert not store.state("shop", "c").paused
    assert [v.candidate_id for v in store.accepted_history("shop", "c")] == [newer]

    # a pause for another reason is not lifted by a moot review
    older, newer = add_candidate(store, "d"), add_candidate(store, "d")
    store.quarantine(older, "price jumped")
    store.update_state("shop", "d", pause_reason="healing budget exhausted after 3 attempts")
    store.accept(newer, run_id="run-2")
    assert store.candidate(older).status == "superseded"
    assert store.state("shop", "d").paused


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_workers_opening_a_fresh_store_together_all_succeed(backend: str, tmp_path: Path, crew_holder: Any) -> None:
    """Run workers started together on a new deployment each create the tables: none may fail."""
    # before the fix PostgreSQL failed most rounds; SQLite's switch to WAL about one round in fifty
    names: list[str] = []
    if backend == "postgres":
        require_postgres()
        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        names = [f"sc_test_{uuid.uuid4().hex[:12]}" for _ in range(4)]
        with admin.connect() as conn:
            for name in names:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        urls = [PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}" for name in names]
    else:
        urls = [f"sqlite:///{tmp_path / f'fresh{i}.db'}" for i in range(60)]
    try:
        outcomes = race("processes", "open_fresh", "", {"iterations": urls}, crew_holder)
        for column in by_iteration(outcomes):
            assert all(kind == "ok" for kind, _ in column), column
        for url in urls[:4]:
            assert {"sc_accepted", "sc_candidates", "sc_selector_versions"} <= set(
                sa.inspect(ProjectStore(url).engine).get_table_names())
    finally:
        for url in urls:
            engine = store_module._engines.pop(url, None)
            if engine is not None:
                engine.dispose()
        if names:
            with admin.connect() as conn:
                for name in names:
                    conn.execute(sa.text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         f"WHERE datname = '{name}'"))
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
            admin.dispose()


class TestStoreRacesInProcesses(_StoreRaces):
    mode = "processes"


# ---- whole runs in separate processes -------------------------------------------------------------------
# the daemon settings of deploy/dagster.postgres.yaml, so the monitoring check below sees production behaviour
RUN_MONITORING = {"enabled": True, "start_timeout_seconds": 180, "cancel_timeout_seconds": 180,
                  "max_resume_run_attempts": 0, "poll_interval_seconds": 60}


def _write_home(home: Path, db_url: str, run_monitoring: dict[str, Any]) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(json.dumps({  # JSON is YAML
        "telemetry": {"enabled": False},
        "storage": {"postgres": {"postgres_url": db_url}},
        "run_monitoring": run_monitoring,
    }))
    return home


@dataclass
class Worker:
    name: str
    app: str  # the application_name of its store sessions
    process: subprocess.Popen
    run_id: str
    ready: Path
    result: Path
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


@dataclass
class RunSetup:
    db_url: str
    home: Path
    contracts_dir: Path
    work: Path
    instance: dg.DagsterInstance
    monitor: sa.Engine
    workers: list[Worker] = field(default_factory=list)

    @property
    def store(self) -> ProjectStore:
        return ProjectStore(self.db_url)

    @property
    def go(self) -> Path:
        return self.work / "go"

    def run_here(self, partition: str = "p1") -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs import build_definitions

        job = build_definitions(self.contracts_dir).resolve_job_def("scrape_shop_job")
        return job.execute_in_process(partition_key=partition, instance=self.instance, raise_on_error=False)

    def start_worker(self, name: str, partition: str) -> Worker:
        """A run of shop/``partition`` in its own process: it builds the job, creates ``ready``, then waits
        for ``go``. (Two runs of one target never both scrape it: the second ends busy, see test_leases_e2e.)"""
        run_id, app = str(uuid.uuid4()), f"sc_{name}"
        ready, result, log = self.work / f"{name}.ready", self.work / f"{name}.json", self.work / f"{name}.log"
        env = {**os.environ, "DAGSTER_HOME": str(self.home), "PYTHONPATH": str(REPO_ROOT),
               # the application name lets the test find this worker's store session in pg_stat_activity
               "SCRAPE_CONTRACTS_DB_URL": f"{self.db_url}?application_name={app}",
               "SCRAPE_CONTRACTS_ARTIFACTS_DIR": str(self.home / "artifacts")}
        with log.open("wb") as out:  # a file, not a pipe nobody reads while the run logs
            process = subprocess.Popen(
                [sys.executable, "-m", "scrape_contracts_tests.defs._worker", "run",
                 "--contracts-dir", str(self.contracts_dir), "--contract", "shop", "--partition", partition,
                 "--run-id", run_id, "--ready", str(ready), "--go", str(self.go), "--result", str(result)],
                env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
        worker = Worker(name, app, process, run_id, ready, result, log)
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.log_tail()}" for w in self.workers)

    def wait_for(self, what: str, condition: Callable[[], Any], alive: list[Worker],
                 timeout: float = WAIT_S) -> Any:
        """Poll ``condition`` until truthy; fail at once if one of the ``alive`` workers exits meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if any(w.process.poll() is not None for w in alive):
                raise AssertionError(f"a worker exited while waiting for {what}:\n{self.logs()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.logs()}")

    def waiting(self, workers: list[Worker], statement: str, blocker: int | Worker) -> dict[str, int] | None:
        """{worker name: backend pid} once every worker's session waits in ``statement`` for a lock held by
        ``blocker``: a backend pid, or any session of another worker."""
        holder = "a.pid = :blocker" if isinstance(blocker, int) else "a.application_name = :blocker"
        with self.monitor.connect() as conn:
            found = conn.execute(sa.text(
                "SELECT w.application_name, w.pid FROM pg_stat_activity w WHERE w.datname = current_database() "
                "AND w.wait_event_type = 'Lock' AND w.query ILIKE :statement AND w.application_name = ANY(:apps) "
                "AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = ANY(pg_blocking_pids(w.pid)) "
                f"AND {holder})"),
                {"statement": statement + "%", "apps": [w.app for w in workers],
                 "blocker": blocker if isinstance(blocker, int) else blocker.app}).all()
        by_app = {w.app: w.name for w in workers}
        pids = {by_app[row.application_name]: row.pid for row in found}
        return pids if len(pids) == len(workers) else None

    def backend_gone(self, pid: int) -> bool:
        with self.monitor.connect() as conn:
            return not conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"),
                                    {"pid": pid}).scalar()

    def finish(self, worker: Worker) -> dict[str, Any]:
        try:
            worker.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{worker.name} did not finish:\n{self.logs()}") from None
        assert worker.process.returncode == 0, self.logs()
        return json.loads(worker.result.read_text())


@pytest.fixture
def run_setup(pg_database: str, site: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunSetup]:
    home = _write_home(tmp_path / "dagster_home", pg_database, RUN_MONITORING)
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    (contracts_dir / "shop.yaml").write_text(textwrap.dedent(PRODUCT_CONTRACT.format(
        name="shop", targets=f"  - url: {site.url('/p/1')}\n    key: p1\n  - url: {site.url('/p/2')}\n    key: p2",
        extra="")))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", pg_database)
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(home / "artifacts"))
    # created here first: the workers then find Dagster's tables instead of racing to migrate them
    instance = dg.DagsterInstance.from_config(str(home))
    setup = RunSetup(pg_database, home, contracts_dir, tmp_path, instance,
                     sa.create_engine(pg_database, isolation_level="AUTOCOMMIT"))
    try:
        yield setup
    finally:
        for worker in setup.workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait(timeout=10)
        setup.monitor.dispose()
        instance.dispose()


class TableLock:
    """``LOCK TABLE table IN mode MODE`` held in an open transaction until ``release()``."""

    def __init__(self, db_url: str, table: str, mode: str) -> None:
        self._engine = sa.create_engine(db_url)
        self._conn: sa.Connection | None = self._engine.connect()
        self._tx = self._conn.begin()
        # a lock that cannot be had means a leftover transaction: fail instead of hanging
        self._conn.execute(sa.text("SET LOCAL lock_timeout = '10s'"))
        self._conn.execute(sa.text(f"LOCK TABLE {table} IN {mode} MODE"))
        self.pid: int = self._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()

    def release(self) -> None:
        if self._conn is not None:
            self._tx.rollback()
            self._conn.close()
            self._conn = None
            self._engine.dispose()

    def __enter__(self) -> TableLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_two_run_workers_heal_two_targets_of_one_contract_together(run_setup: RunSetup, site: Any) -> None:
    """Two runs, one target each, both heal the contract's selectors at once: both heals are kept."""
    setup = run_setup
    # started first: their seconds of importing overlap the first runs, and they wait for the go file
    workers = [setup.start_worker("run_a", "p1"), setup.start_worker("run_b", "p2")]
    for path in ("/p/1", "/p/2"):
        site.set_page(path, product_page("Dune", "BK-1", "$100.00"))
    assert setup.run_here("p1").success and setup.run_here("p2").success
    for path in ("/p/1", "/p/2"):
        site.set_page(path, product_page("Dune", "BK-1", "$100.00", layout="renamed"))
    # both runs read selector version 1 and heal; holding their selector INSERTs until both are there makes
    # them really collide at the compare-and-swap instead of one finishing before the other starts
    with TableLock(setup.db_url, "sc_selector_versions", "SHARE") as lock:
        setup.wait_for("both workers to be ready", lambda: all(w.ready.exists() for w in workers), workers)
        setup.go.touch()
        setup.wait_for("both runs to block saving a healed selector version",
                       lambda: setup.waiting(workers, "INSERT INTO sc_selector_versions", lock.pid), workers)
    for worker in workers:
        assert setup.finish(worker) == {"run_id": worker.run_id, "success": True, "failures": []}, setup.logs()
    run_ids = {w.run_id for w in workers}

    store = setup.store
    for worker, partition in zip(workers, ("p1", "p2"), strict=True):
        history = store.accepted_history("shop", partition)
        assert [v.version for v in history] == [1, 2]
        assert history[-1].run_id == worker.run_id  # each run accepted its own candidate, once
        assert store.candidate(history[-1].candidate_id).run_id == worker.run_id
        assert history[-1].record == {"title": "Dune", "sku": "BK-1", "price": 100.0}

    selectors = store.selector_history("shop")
    assert [(v.version, v.parent_version, v.source) for v in selectors] == [
        (1, None, "contract"), (2, 1, "heal"), (3, 2, "heal")]
    assert {v.run_id for v in selectors[1:]} == run_ids  # both heals were saved, neither lost
    contract = load_contracts(setup.contracts_dir).by_name()["shop"].contract
    page = product_page("Dune", "BK-1", "$100.00", layout="renamed")
    extraction = extract_record(page, contract.fields, selectors[-1].selectors)
    assert extraction.record == {"title": "Dune", "sku": "BK-1", "price": 100.0}
    assert not extraction.problems
    for run_id in run_ids:
        assert setup.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS


def test_runs_killed_inside_the_accept_transaction_leave_no_trace(run_setup: RunSetup, site: Any,
                                                                 tmp_path: Path) -> None:
    """SIGKILL two runs inside their accept transaction: one blocked in the INSERT of its accepted version,
    the other just after its INSERT, in the UPDATE marking its candidate accepted (where a non-atomic
    accept would already have left a row behind). One target each: a second run of one target ends busy."""
    setup = run_setup
    workers = [setup.start_worker("victim_a", "p1"), setup.start_worker("victim_b", "p2")]
    for path in ("/p/1", "/p/2"):
        site.set_page(path, product_page("Dune", "BK-1", "$100.00"))
    assert setup.run_here("p1").success and setup.run_here("p2").success
    for path in ("/p/1", "/p/2"):
        site.set_page(path, product_page("Dune", "BK-1", "$110.00"))
    # SHARE blocks only writers: the runs read sc_accepted freely (fetch, validate) and both stop at the
    # INSERT of their accepted version
    insert_lock = TableLock(setup.db_url, "sc_accepted", "SHARE")
    update_lock: TableLock | None = None
    try:
        setup.wait_for("both workers to be ready", lambda: all(w.ready.exists() for w in workers), workers)
        setup.go.touch()
        backends = setup.wait_for("both runs to block inserting their accepted version",
                                  lambda: setup.waiting(workers, "INSERT INTO sc_accepted", insert_lock.pid),
                                  workers)
        first, second = workers
        first_backend = backends[first.name]
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=10)

        # nobody writes sc_candidates now, so this lock is granted at once; SHARE leaves the INSERT's
        # foreign-key check (a row share lock) alone and stops the second run at its UPDATE
        update_lock = TableLock(setup.db_url, "sc_candidates", "SHARE")
        insert_lock.release()
        # the server notices the dead client only once its INSERT returns; it must then roll back everything
        setup.wait_for("the first killed run's session to end", lambda: setup.backend_gone(first_backend), [second])
        [second_backend] = setup.wait_for(
            "the other run to block marking its candidate accepted",
            lambda: setup.waiting([second], "UPDATE sc_candidates", update_lock.pid), [second]).values()
        os.kill(second.process.pid, signal.SIGKILL)
        second.process.wait(timeout=10)
        update_lock.release()
        setup.wait_for("the second killed run's session to end", lambda: setup.backend_gone(second_backend), [])
    finally:
        insert_lock.release()
        if update_lock is not None:
            update_lock.release()
    assert [w.process.returncode for w in workers] == [-signal.SIGKILL, -signal.SIGKILL]

    store = setup.store
    for partition in ("p1", "p2"):
        latest = store.latest_accepted("shop", partition)
        assert (latest.version, latest.record["price"]) == (1, 100.0)
    assert read_accepted("shop", db_url=setup.db_url)["price"].tolist() == [100.0, 100.0]
    assert len(rows(store, sa.select(accepted))) == 2
    victims = {w.run_id for w in workers}
    victim_candidates = rows(store, sa.select(candidates).where(candidates.c.run_id.in_(victims)))
    # written by their heal steps, never accepted
    assert sorted((c.status, c.record["price"]) for c in victim_candidates) == [("pending", 110.0)] * 2
    for partition in ("p1", "p2"):
        state = store.state("shop", partition)
        assert not state.paused and state.heal_attempts == 0

    # Dagster never heard of the deaths: the runs stay STARTED
    instance = setup.instance
    assert {instance.get_run_by_id(r).status for r in victims} == {dg.DagsterRunStatus.STARTED}
    from dagster._daemon.monitoring.run_monitoring import monitor_started_run

    log = logging.getLogger("test_concurrency.run_monitoring")
    # these workers were started by the test, not by a launcher: with DefaultRunLauncher (this instance's), no
    # worker health check exists, so the daemon's monitoring leaves a dead run STARTED ...
    monitor_started_run(instance, None, instance.get_run_record_by_id(first.run_id), log)  # type: ignore[arg-type]
    assert instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.STARTED
    # ... and only a runtime limit fails it
    limited_home = _write_home(tmp_path / "limited_home", setup.db_url, {**RUN_MONITORING, "max_runtime_seconds": 1})
    limited = dg.DagsterInstance.from_config(str(limited_home))
    try:
        record = limited.get_run_record_by_id(first.run_id)
        time.sleep(max(0.0, record.start_time + 1.1 - time.time()))
        monitor_started_run(limited, None, limited.get_run_record_by_id(first.run_id), log)  # type: ignore[arg-type]
        assert limited.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.FAILURE
    finally:
        limited.dispose()

    # the failed run's target is taken over at once; the one still STARTED keeps p2 until its lease expires
    result = setup.run_here("p1")
    assert result.success
    history = store.accepted_history("shop", "p1")
    assert [(v.version, v.record["price"]) for v in history] == [(1, 100.0), (2, 110.0)]
    assert history[-1].run_id == result.run_id
    assert store.candidate(history[-1].candidate_id).run_id == result.run_id
    assert rows(store, sa.select(accepted).where(accepted.c.run_id.in_(victims))) == []
