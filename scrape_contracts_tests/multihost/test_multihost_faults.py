"""The multi-host sweep with faults: host A switched off (every process SIGKILLed) and host C frozen (SIGSTOP)
while each is midway through a chunk, host B left to finish. Each host's pages are answered up to a few,
then held until the test has stopped the host (the site's ``hold``), so nothing depends on timing.

Shown: the sweep completes (the broker hands the dead and the frozen hosts' chunks to B); every accepted
version is there once, none lost, none twice; revived, the frozen host's late commits are refused by the
fencing tokens of the attempt that took its chunk over (``lease_lost`` on its step).
"""

from __future__ import annotations

import collections
import signal
import threading
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts.testing.faults import (
    accepted_ids, chunk_attempts, freeze_between_transactions, observations, step_story, thaw,
)
from scrape_contracts_tests.multihost.sweeps import CONCURRENCY, Sweep

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGETS = 180
FREE = 6  # pages each host is answered before its others are held


def test_a_killed_host_and_a_frozen_one_lose_nothing_and_the_stale_commits_are_refused(
        cluster: netns.Cluster, pg_database: str, tmp_path: Path) -> None:
    shop = multihost.Shop()
    workers = {cluster.hosts[name].address: name for name in cluster.workers}
    gates = {name: threading.Event() for name in cluster.workers}
    answered: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def hold(client: str, path: str) -> threading.Event | None:
        with lock:
            answered[client] += 1
            return gates[workers[client]] if answered[client] > FREE else None

    plans = {a: HostPlan(latency_s=0.02, page=shop.page) for a in cluster.site_addresses}
    with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns), hold=hold) as site:
        try:
            targets = multihost.dealt_targets(site, cluster.site_addresses, TARGETS)
            multihost.write_contract(tmp_path / "contracts", "shop", targets, CONCURRENCY)
            store = sa.create_engine(pg_database)
            with multihost.deployment(cluster, pg_database, tmp_path / "contracts",
                                      SCRAPE_CONTRACTS_CHUNKS="6") as deployment:
                sweep = Sweep(deployment)
                sweep.workers_up("a", "b", "c", heartbeat=4)  # a frozen worker's chunk handed on in seconds
                running = deployment.start_sweep("shop", "faults")

                def committed_by(host: str) -> set[str]:
                    fetched = {f"p{s.path[3:]}" for s in site.requests() if workers.get(s.client) == host}
                    return fetched & set(accepted_ids(store))

                # A and C midway: some of their targets committed, their next pages held
                for host in ("a", "c"):
                    netns.wait_until(f"host {host} has committed targets", lambda h=host: committed_by(h),
                                     240)
                before = accepted_ids(store)
                sweep.phase(f"A committed {len(committed_by('a'))}, C {len(committed_by('c'))}: "
                            "A killed, C frozen")
                cluster.signal("a", signal.SIGKILL)
                # between two of its transactions: frozen inside one, C would wake to find it ended by the
                # server (test_store_frozen_client.py), not to commit with its stale tokens
                assert freeze_between_transactions(cluster, store, "c")
                for gate in gates.values():
                    gate.set()
                log = deployment.log(netns.CONTROL, "sweep-faults")
                assert running.wait(400) == 0, log.read_text()[-3000:]
                sweep.phase("sweep done")
                batch_runs = dg.RunsFilter(job_name="scrape_shop_batch_job")
                run_ids = [r.run_id for r in sweep.instance.get_runs(filters=batch_runs)]
                attempts = chunk_attempts(sweep.instance, run_ids)
                sweep.phase(f"chunk attempts: {attempts}")
                # the chunks A and C had when they stopped went to B (a chunk of B's may have been handed on
                # too, if the broker missed B's heartbeats under load: B then took it again)
                handed_on = {step: hosts for step, hosts in attempts.items()
                             if len(hosts) > 1 and hosts[0] in ("host-a", "host-c")}
                assert sorted(hosts[0] for hosts in handed_on.values()) == ["host-a", "host-c"], attempts
                assert all(hosts[-1] == "host-b" for hosts in handed_on.values()), attempts
                after = accepted_ids(store)
                # every target accepted once; what was accepted before the faults is still there
                assert {key: len(ids) for key, ids in after.items()} == {key: 1 for key in targets}
                assert all(after[key] == ids for key, ids in before.items())

                # C wakes: its attempt goes on and tries to commit what it had; the new tokens refuse it
                thaw(cluster, "c")
                [c_step] = [step for step, hosts in handed_on.items() if hosts[0] == "host-c"]
                try:
                    refused = netns.wait_until("host C's late commits refused", lambda: [
                        o for o in observations(sweep.instance, run_ids, "lease_lost") if o[0] == c_step], 300)
                except TimeoutError:
                    raise AssertionError(f"{c_step} on C after SIGCONT: {step_story(sweep.instance, run_ids, c_step)}"
                                         ) from None
                sweep.phase(f"C's {len(refused)} late commit(s) refused")
                assert accepted_ids(store) == after
            store.dispose()
        finally:
            for gate in gates.values():
                gate.set()
