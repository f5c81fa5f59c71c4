"""A sweep over three worker hosts (network namespaces, ``scrape_contracts.testing.netns``): the chunk steps of
the batched runs placed by dagster-celery on the RabbitMQ broker, every host with its own empty folders, the
database and the broker reached over the bridge, the site served from a fourth namespace.

Shown: every target's outcome recorded exactly once, the same per-partition events and outcomes as the same
sweep on one machine, the work spread over the three hosts (the site's log says which host asked; the
engine events say which worker ran each chunk), politeness never exceeded as the site counts it, and a heal
on host B from the page host A stored (the element fingerprints deleted first, so nothing but the page can
serve).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts_tests.multihost.sweeps import (
    CONCURRENCY, Sweep, chunk_workers, multihost_events, page_clients, single_machine_events,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGETS = 240
HEALED = ["h1", "h2", "h3"]


def test_a_sweep_over_three_hosts_is_the_sweep_of_one_machine(cluster: netns.Cluster, pg_database: str,
                                                               tmp_path: Path) -> None:
    shop = multihost.Shop()
    for n in range(0, TARGETS, 40):  # no price on the page: the first scrape cannot heal it
        shop.layout[f"/p/{n}"] = "noprice"
    plans = {a: HostPlan(latency_s=0.02, page=shop.page) for a in cluster.site_addresses}
    with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns)) as site:
        targets = multihost.dealt_targets(site, cluster.site_addresses, TARGETS)
        contracts = tmp_path / "contracts"
        multihost.write_contract(contracts, "shop", targets, CONCURRENCY)
        heal_targets = {key: site.url(cluster.site_addresses[i % 4], f"/h/{i}") for i, key in enumerate(HEALED)}
        multihost.write_contract(contracts, "moved", heal_targets, CONCURRENCY)

        # the same sweep on one machine first (this process: one step, in-process executor, SQLite)
        expected = single_machine_events(contracts, "shop", tmp_path / "one_machine")
        site.reset()

        with multihost.deployment(cluster, pg_database, contracts, SCRAPE_CONTRACTS_CHUNKS="6") as deployment:
            sweep = Sweep(deployment)
            # host A alone stores the pages of `moved`
            sweep.workers_up("a")
            first_moved = sweep.run("moved", "moved-1")
            assert set(page_clients(site, "/h/")) == {cluster.hosts["a"].address}

            sweep.workers_up("b", "c")
            site.reset()
            run_ids = sweep.run("shop", "shop-1")
            # every target fetched once, each host its share, the site's budget per host kept
            shares = page_clients(site, "/p/")
            assert sorted(s.path for s in site.requests() if s.path.startswith("/p/")) == sorted(
                f"/p/{n}" for n in range(TARGETS))
            assert set(shares) == {h.address for h in cluster.hosts.values() if h.name != netns.CONTROL}, shares
            assert all(count > 0 for count in shares.values())
            assert max(site.peak(a) for a in cluster.site_addresses) <= CONCURRENCY
            assert set(chunk_workers(sweep.instance, run_ids)) == {"host-a", "host-b", "host-c"}

            # exactly once: one candidate per target in the sweep's runs, one accepted version per accepted one
            store = sa.create_engine(pg_database)
            with store.connect() as conn:
                per_target = dict(conn.execute(sa.text(
                    "select partition, count(*) from sc_candidates where contract = 'shop' group by partition")).all())
                accepted = dict(conn.execute(sa.text(
                    "select partition, count(*) from sc_accepted where contract = 'shop' group by partition")).all())
            assert per_target == {key: 1 for key in targets}
            good = {f"p{n}" for n in range(TARGETS) if n % 40}
            assert accepted == {key: 1 for key in good}
            # the same materialisations, check evaluations and outcomes per partition as on one machine
            assert multihost_events(sweep.instance, pg_database, "shop", run_ids) == expected

            # the layout of `moved` changes; host B alone scrapes it again, with A's pages in the store only
            deployment.stop_worker("a")
            deployment.stop_worker("c", signal.SIGKILL)
            for i in range(len(HEALED)):
                shop.layout[f"/h/{i}"] = "renamed"
            with store.begin() as conn:
                assert conn.execute(sa.text("delete from sc_fingerprints where contract = 'moved'")).rowcount > 0
            site.reset()
            second_moved = sweep.run("moved", "moved-2")
            assert set(page_clients(site, "/h/")) == {cluster.hosts["b"].address}
            assert set(chunk_workers(sweep.instance, second_moved)) == {"host-b"}
            with store.connect() as conn:
                healed = conn.execute(sa.text(
                    "select partition, outcome, status from sc_candidates where contract = 'moved' and run_id = any(:r)"
                ), {"r": second_moved}).all()
                heal_pages = conn.execute(sa.text(
                    "select count(*) from sc_pages p join sc_candidates c on c.page_sha256 = p.sha256 "
                    "where c.contract = 'moved' and c.run_id = any(:r)"), {"r": first_moved}).scalar()
            assert sorted(healed) == [(key, "healed", "accepted") for key in sorted(HEALED)]
            assert heal_pages == len(HEALED)
            # B's folder holds no page: what it healed from came from the store
            assert not list((cluster.hosts["b"].home / "dagster_home").rglob("*.html.gz"))
            store.dispose()
