"""The multi-host sweep with the broker taken away from the worker hosts for a while mid-sweep (its relay
ended: their connections reset, new ones refused, as when RabbitMQ goes down; ``netns.Cluster.cut``), then
given back. Each host's pages are answered up to a few, then held until every worker has seen the broker
gone, so the outage falls mid-chunk without timing anything.

Shown: the sweep completes (the workers reconnect; the broker had kept the unacknowledged chunks, acks_late,
and hands them out again); every target recorded and accepted exactly once, none lost, none twice (a chunk
handed out again scrapes only what its earlier attempt had not recorded), what was accepted before the
outage unchanged.

Self-contained fixtures (the cluster of conftest.py only), so the shared deployment of the other modules
is not touched.
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts.testing.faults import accepted_ids, chunk_attempts
from scrape_contracts_tests.multihost.sweeps import CONCURRENCY, Sweep

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGETS = 120
FREE = 4  # pages each host is answered before its others are held
BROKER = 5672
# what a Celery worker logs once it has lost the broker and cannot reach it again (kombu's words)
_LOST = ("Connection to broker lost", "Cannot connect to amqp")


def test_the_broker_gone_for_a_while_mid_sweep_loses_nothing_and_the_sweep_completes(
        cluster: netns.Cluster, pg_database: str, tmp_path: Path) -> None:
    shop = multihost.Shop()
    workers = {cluster.hosts[name].address: name for name in cluster.workers}
    gate = threading.Event()
    answered: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def hold(client: str, path: str) -> threading.Event | None:
        with lock:
            answered[client] += 1
            return gate if client in workers and answered[client] > FREE else None

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
                netns.wait_until("a host midway through a chunk",
                                 lambda: any(answered[cluster.hosts[h].address] > FREE for h in cluster.workers),
                                 240)
                before = accepted_ids(store)
                marks = {h: len(deployment.log(h, "worker").read_text(errors="replace")) for h in cluster.workers}
                cluster.cut(BROKER)
                sweep.phase(f"broker cut, {len(before)} accepted")

                def lost(host: str) -> bool:
                    text = deployment.log(host, "worker").read_text(errors="replace")[marks[host]:]
                    return any(word in text for word in _LOST)

                netns.wait_until("every worker has seen the broker gone",
                                 lambda: all(lost(h) for h in cluster.workers), 120)
                sweep.phase("every worker saw the broker gone")
                gate.set()  # the chunks go on without the broker: their commits need only the database
                cluster.restore(BROKER)
                sweep.phase("broker back")
                log = deployment.log(netns.CONTROL, "sweep-outage")
                assert running.wait(420) == 0, log.read_text()[-3000:]
                sweep.phase("sweep done")
                batch_runs = dg.RunsFilter(job_name="scrape_shop_batch_job")
                run_ids = [r.run_id for r in sweep.instance.get_runs(filters=batch_runs)]
                sweep.phase(f"chunk attempts: {chunk_attempts(sweep.instance, run_ids)}")
                after = accepted_ids(store)
                assert {key: len(ids) for key, ids in after.items()} == {key: 1 for key in targets}
                assert all(after[key] == ids for key, ids in before.items())
                # each target's outcome recorded once: a chunk the broker handed out again scrapes only
                # what its earlier attempt had not recorded (a second "unchanged" candidate otherwise)
                with store.connect() as conn:
                    per_target = collections.Counter(p for (p,) in conn.execute(sa.text(
                        "select partition from sc_candidates where contract = 'shop'")))
                assert per_target == {key: 1 for key in targets}
                sweep.phase(f"{len(per_target)} targets recorded and accepted once each")
            store.dispose()
        finally:
            gate.set()
