"""The multi-host sweep with the broker, or the database, taken away from the worker hosts for a while
mid-sweep (its relay ended: their connections reset, new ones refused, as when that server goes down;
``netns.Cluster.cut``), then given back. Each host's pages are answered up to a few, then held, so the
outage falls mid-chunk without timing anything.

Shown, for both: the sweep completes; every target recorded and accepted exactly once, none lost, none
twice, what was accepted before the outage unchanged.

- The broker: the workers reconnect; the broker had kept the unacknowledged chunks (acks_late) and hands them
  out again, and a chunk handed out again scrapes only what its earlier attempt had not recorded.
- The database (the control host keeps it; the Dagster instance's storage is on the same server, so the
  chunk steps lose both): each chunk step waits for it (its store connections retry for
  ``SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS``) and goes on where it was once it answers.

Self-contained fixtures (the cluster of conftest.py only), so the shared deployment of the other modules
is not touched.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts.testing.faults import accepted_ids, chunk_attempts
from scrape_contracts_tests.multihost.sweeps import CONCURRENCY, Sweep

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGETS = 120
FREE = 4  # requests each host is answered before its others are held (robots.txt of the 4 site hosts count)
BROKER, DATABASE = 5672, 5432
# what a Celery worker logs once it has lost the broker and cannot reach it again (kombu's words)
_LOST = ("Connection to broker lost", "Cannot connect to amqp")
# what a chunk step logs while it waits for the project store (adapters/store/engines.py)
_WAITING = "waiting for it"


@dataclass
class Held:
    """A sweep under way on hosts a, b, c whose workers' requests are held from their ``free + 1``-th on."""

    cluster: netns.Cluster
    deployment: multihost.Deployment
    sweep: Sweep
    running: Popen
    store: sa.Engine
    targets: dict[str, str]
    gate: threading.Event
    answered: collections.Counter[str]
    free: int
    marks: dict[str, int] = field(default_factory=dict)  # each worker log's length when the outage began

    def midway(self, host: str) -> bool:
        """Whether ``host`` has had its free pages and waits for the next ones."""
        return self.answered[self.cluster.hosts[host].address] > self.free

    def mark(self) -> None:
        self.marks = {h: len(self.worker_log(h)) for h in self.cluster.workers}

    def worker_log(self, host: str) -> str:
        return self.deployment.log(host, "worker").read_text(errors="replace")

    def logged_since_mark(self, host: str, words: tuple[str, ...]) -> bool:
        text = self.worker_log(host)[self.marks.get(host, 0):]
        return any(word in text for word in words)

    def completes_with_each_target_once(self, before: dict[str, list[int]]) -> None:
        log = self.deployment.log(netns.CONTROL, "sweep-outage")
        assert self.running.wait(420) == 0, log.read_text()[-3000:]
        self.sweep.phase("sweep done")
        batch_runs = dg.RunsFilter(job_name="scrape_shop_batch_job")
        run_ids = [r.run_id for r in self.sweep.instance.get_runs(filters=batch_runs)]
        self.sweep.phase(f"chunk attempts: {chunk_attempts(self.sweep.instance, run_ids)}")
        after = accepted_ids(self.store)
        assert {key: len(ids) for key, ids in after.items()} == {key: 1 for key in self.targets}
        assert all(after[key] == ids for key, ids in before.items())
        # each target's outcome recorded once: a chunk handed out again scrapes only what its earlier attempt
        # had not recorded (a second "unchanged" candidate otherwise)
        with self.store.connect() as conn:
            per_target = collections.Counter(p for (p,) in conn.execute(sa.text(
                "select partition from sc_candidates where contract = 'shop'")))
        assert per_target == {key: 1 for key in self.targets}
        self.sweep.phase(f"{len(per_target)} targets recorded and accepted once each")


@contextlib.contextmanager
def held_sweep(cluster: netns.Cluster, pg_database: str, tmp_path: Path, free: int = FREE) -> Iterator[Held]:
    """The sweep started, and the first worker host midway through a chunk (its next pages held)."""
    shop = multihost.Shop()
    workers = {cluster.hosts[name].address: name for name in cluster.workers}
    gate = threading.Event()
    answered: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def hold(client: str, path: str) -> threading.Event | None:
        with lock:
            answered[client] += 1
            return gate if client in workers and answered[client] > free else None

    plans = {a: HostPlan(latency_s=0.02, page=shop.page) for a in cluster.site_addresses}
    with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns), hold=hold) as site:
        try:
            targets = multihost.dealt_targets(site, cluster.site_addresses, TARGETS)
            multihost.write_contract(tmp_path / "contracts", "shop", targets, CONCURRENCY)
            store = sa.create_engine(pg_database)
            with multihost.deployment(cluster, pg_database, tmp_path / "contracts",
                                      SCRAPE_CONTRACTS_CHUNKS="6") as deployment:
                sweep = Sweep(deployment)
                sweep.workers_up("a", "b", "c", heartbeat=4)
                running = deployment.start_sweep("shop", "outage")
                # the first host midway through a chunk: the others' pages are held only from then until the
                # gate opens, seconds later (waiting for all three would hold the first one's past its
                # fetch timeout when a chunk starts late on a loaded machine)
                held = Held(cluster, deployment, sweep, running, store, targets, gate, answered, free)
                netns.wait_until("a host midway through a chunk",
                                 lambda: any(held.midway(h) for h in cluster.workers), 240)
                yield held
            store.dispose()
        finally:
            gate.set()


def test_the_broker_gone_for_a_while_mid_sweep_loses_nothing_and_the_sweep_completes(
        cluster: netns.Cluster, pg_database: str, tmp_path: Path) -> None:
    with held_sweep(cluster, pg_database, tmp_path) as held:
        before = accepted_ids(held.store)
        held.mark()
        cluster.cut(BROKER)
        held.sweep.phase(f"broker cut, {len(before)} accepted")
        netns.wait_until("every worker has seen the broker gone",
                         lambda: all(held.logged_since_mark(h, _LOST) for h in cluster.workers), 120)
        held.sweep.phase("every worker saw the broker gone")
        held.gate.set()  # the chunks go on without the broker: their commits need only the database
        cluster.restore(BROKER)
        held.sweep.phase("broker back")
        held.completes_with_each_target_once(before)


def test_the_database_gone_for_a_while_mid_sweep_loses_nothing_and_the_sweep_completes(
        cluster: netns.Cluster, pg_database: str, tmp_path: Path) -> None:
    # room for some pages after the robots.txt files: targets accepted before the cut, which must stay as they are
    with held_sweep(cluster, pg_database, tmp_path, free=2 * FREE) as held:
        before = netns.wait_until("targets accepted before the cut", lambda: accepted_ids(held.store), 120)
        held.mark()
        cluster.cut(DATABASE)
        held.sweep.phase(f"database cut, {len(before)} accepted")
        held.gate.set()  # the chunks go on: their held pages come, and they meet the database gone
        netns.wait_until("every worker has seen the database gone",
                         lambda: all(held.logged_since_mark(h, _WAITING) for h in cluster.workers), 120)
        held.sweep.phase("every worker saw the database gone")
        cluster.restore(DATABASE)
        held.sweep.phase("database back")
        held.completes_with_each_target_once(before)
