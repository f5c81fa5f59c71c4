"""A sweep over three worker hosts (network namespaces, ``scrape_contracts.testing.netns``): the chunk steps
of the batched runs placed by dagster-celery on the RabbitMQ broker, every host with its own empty folders,
the database and the broker reached over the bridge, the site served from a fourth namespace.

Shown: every target's outcome recorded exactly once, the same per-partition events and outcomes as the same
sweep on one machine, the work spread over the three hosts (the site's log says which host asked; the
engine events say which worker ran each chunk), politeness never exceeded as the site counts it, and a heal
on host B from the page host A stored (no element fingerprints in the store: nothing but the page can
serve).
"""

from __future__ import annotations

import collections
import signal
from pathlib import Path

import pytest
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.faults import chunk_workers
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts_tests.multihost.sweeps import (
    CONCURRENCY, SingleMachine, Sweep, multihost_events,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGETS = 240
MOVED = 3  # targets whose layout changes after the first sweep: host B heals them from host A's pages


def test_a_sweep_over_three_hosts_is_the_sweep_of_one_machine(cluster: netns.Cluster, pg_database: str,
                                                               tmp_path: Path) -> None:
    shop = multihost.Shop()
    for n in range(0, TARGETS, 40):  # no price on the page: the first scrape cannot heal it
        shop.layout[f"/p/{n}"] = "noprice"
    plans = {a: HostPlan(latency_s=0.02, page=shop.page) for a in cluster.site_addresses}
    workers = {cluster.hosts[name].address: name for name in cluster.workers}
    with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns)) as site:
        targets = multihost.dealt_targets(site, cluster.site_addresses, TARGETS)
        contracts = tmp_path / "contracts"
        multihost.write_contract(contracts, "shop", targets, CONCURRENCY)
        # the same sweep on one machine, while the hosts start
        one_machine = SingleMachine(contracts, "shop", tmp_path / "one_machine")
        with multihost.deployment(cluster, pg_database, contracts, SCRAPE_CONTRACTS_CHUNKS="6") as deployment:
            sweep = Sweep(deployment)
            sweep.workers_up("a", "b", "c")
            expected = one_machine.story()  # done before the sweep: the site's peaks are the hosts' alone
            site.reset()
            first = sweep.run("shop", "sweep-1")

            # every target fetched once, each host its share, the site's budget per host kept
            fetched_by = {s.path: workers[s.client] for s in site.requests() if s.path.startswith("/p/")}
            assert sorted(s.path for s in site.requests() if s.path.startswith("/p/")) == sorted(
                f"/p/{n}" for n in range(TARGETS))
            shares = collections.Counter(fetched_by.values())
            print(f"shares: {dict(shares)}; peaks: {[site.peak(a) for a in cluster.site_addresses]}")
            assert set(shares) == {"a", "b", "c"}
            assert max(site.peak(a) for a in cluster.site_addresses) <= CONCURRENCY
            assert set(chunk_workers(sweep.instance, first).values()) == {"host-a", "host-b", "host-c"}

            # exactly once: one candidate per target, one accepted version per accepted one
            store = sa.create_engine(pg_database)
            with store.connect() as conn:
                per_target = dict(conn.execute(sa.text(
                    "select partition, count(*) from sc_candidates group by partition")).all())
                accepted = dict(conn.execute(sa.text(
                    "select partition, count(*) from sc_accepted group by partition")).all())
            assert per_target == {key: 1 for key in targets}
            assert accepted == {f"p{n}": 1 for n in range(TARGETS) if n % 40}
            # the same materialisations, check evaluations and outcomes per partition as on one machine
            assert multihost_events(sweep.instance, pg_database, "shop", first) == expected

            # pages host A fetched change their layout; host B alone sweeps again, A's pages in the store only
            moved = [p for p, host in sorted(fetched_by.items()) if host == "a" and int(p[3:]) % 40][:MOVED]
            deployment.stop_worker("a")
            deployment.stop_worker("c", signal.SIGKILL)
            for path in moved:
                shop.layout[path] = "renamed"
            site.reset()
            second = sweep.run("shop", "sweep-2")
            assert {workers[s.client] for s in site.requests()} == {"b"}
            assert set(chunk_workers(sweep.instance, second).values()) == {"host-b"}
            keys = [f"p{path[3:]}" for path in moved]
            with store.connect() as conn:
                outcomes = dict(conn.execute(sa.text(
                    "select partition, outcome from sc_candidates "
                    "where run_id = any(:r) and partition = any(:k)"
                ), {"r": second, "k": keys}).all())
                # the pages A stored in the first sweep (sc_pages, the store's page storage) for those targets
                stored = conn.execute(sa.text(
                    "select count(*) from sc_accepted a join sc_pages p on p.sha256 = a.page_sha256 "
                    "where a.run_id = any(:r) and a.partition = any(:k)"), {"r": first, "k": keys}).scalar()
                # no element fingerprints (none are taken while the last page is kept): only A's page serves
                assert conn.execute(sa.text("select count(*) from sc_fingerprints")).scalar() == 0
            # the first one healed (a new selector version); the others read with it, their data unchanged
            assert sorted(outcomes) == sorted(keys) and set(outcomes.values()) <= {"healed", "unchanged"}
            assert "healed" in outcomes.values(), outcomes
            assert stored == MOVED
            # B's folder holds no page: what it healed from came from the store
            assert not list(cluster.hosts["b"].home.rglob("*.html.gz"))
            store.dispose()
