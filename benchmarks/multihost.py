"""Multi-host benchmark: one latency-bound site swept by 1, 2 and 3 worker hosts (Linux network namespaces),
each time against the politeness bound. Needs root, ``ip`` (iproute2), PostgreSQL and RabbitMQ on 127.0.0.1.

Run from the repo root (venv active)::

    python benchmarks/multihost.py                     # 20,000 targets, 1, 2 and 3 hosts
    python benchmarks/multihost.py --targets 500 --workers 3    # a quick try on one Linux machine

What it does, for each number of worker hosts:

1. makes the hosts (``scrape_contracts/testing/netns.py``): worker hosts a, b, c, a control host (the
   daemon and the run workers) and a site namespace serving ``--site-hosts`` site hosts, each answering
   after its own latency, spread evenly over 100-400 ms; the targets are dealt to the site hosts in turn;
2. deploys the product on them (``scrape_contracts/testing/multihost.py``): ``deploy/dagster.postgres.yaml``
   on every host, a throw-away PostgreSQL database reached over the bridge, pages in the project store, one
   ``dagster-celery`` worker per worker host on a RabbitMQ virtual host of its own, the batched runs' chunk
   steps on Celery (``--chunks`` per run);
3. sweeps: ``scrape-contracts run shop --queue --wait`` on the control host, timed from the command's start
   to its end (``wall``) and from the first run's start to the last one's end (``runs``);
4. prints the politeness bound (the least time any client keeping to ``fetch.concurrency`` per site host
   could take: for each site host, its pages times its latency over the concurrency; the largest of these),
   each time's ratio to it (bound / time: 1.0 is the bound), each worker host's share of the pages (the
   site's log by client address) and the most requests in flight at once on any site host, as the site
   counted them (at most ``--concurrency`` if politeness held across the hosts), and each worker host's peak
   memory (its processes' resident memory added up, sampled every 0.5 s; not with ``--faults``);
5. with ``--faults`` (three hosts): once ``--fault-at`` of the targets are recorded, every process of host a
   SIGKILLed and host c SIGSTOPped between two of its transactions, until its chunk's leases have run out by
   the store's clock and the run of that chunk has ended, then SIGCONTed (``scrape_contracts/testing/
   faults.py``); then it checks that every target has one candidate and one accepted version, that the
   killed and the frozen hosts' chunks were handed on, and that each target taken over from the frozen host
   had its late commit refused (``lease_lost``), and exits non-zero if one of these does not hold.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import dagster as dg  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench_procs import status_kb  # noqa: E402
from scrape_contracts.testing import faults, multihost, netns  # noqa: E402
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite  # noqa: E402

ADMIN = os.environ.get("SCRAPE_CONTRACTS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _database() -> tuple[str, sa.Engine]:
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    name = f"sc_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    return ADMIN.rsplit("/", 1)[0] + f"/{name}", admin


def _drop(url: str, admin: sa.Engine) -> None:
    name = url.rsplit("/", 1)[1]
    with admin.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             f"WHERE datname = '{name}'"))
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


def _fault_figures(midway: faults.Midway, instance: dg.DagsterInstance, store: sa.Engine, run_ids: list[str],
                   targets: dict[str, str]) -> dict:
    """What the faults left: each target's accepted versions and candidates, the chunks handed on, the frozen
    host's refused commits; ``failed`` lists the checks that did not hold."""
    refused, stale_failures = midway.stale_ending()
    accepted = faults.accepted_ids(store)
    candidates = faults.candidate_counts(store, "shop")
    handed_on = {f"{run_id[:8]}/{step}": hosts for run_id in run_ids  # each run has the same step keys
                 for step, hosts in faults.chunk_attempts(instance, [run_id]).items() if len(hosts) > 1}
    lease_lost = faults.observations(instance, run_ids, "lease_lost")
    figures = {
        "lost": sorted(set(targets) - set(accepted)), "twice": sorted(k for k, v in accepted.items() if len(v) > 1),
        "unrecorded": sorted(set(targets) - set(candidates)),
        "recorded twice": sorted(k for k, n in candidates.items() if n > 1),
        "handed on": handed_on, "taken over": midway.stale_leases, "refused": len(refused),
        "stale failures": stale_failures,
        "lease_lost in all": len(lease_lost), "said": midway.said}
    failed = [f"{len(figures[k])} target(s) {k}" for k in ("lost", "twice", "unrecorded", "recorded twice")
              if figures[k]]
    for host, holder in ((midway.killed, midway.killed_holder), (midway.frozen, midway.stale_holder)):
        run_id, step = faults.chunk_step("shop", holder)
        if handed_on.get(f"{run_id[:8]}/{step}", [""])[0] != f"host-{host}":
            failed.append(f"host {host}'s chunk {step} of run {run_id[:8]} not handed on")
    # revived, the frozen attempt either commits each target taken over from it and is refused every time, or
    # finds the transaction it was frozen in ended by the server and stops there; it records nothing either way
    if midway.stale_leases == 0 or not (len(refused) == midway.stale_leases or stale_failures):
        failed.append(f"{len(refused)} of host {midway.frozen}'s commits refused and {len(stale_failures)} "
                      f"failure(s) of its attempt, {midway.stale_leases} targets taken over from it")
    return {**figures, "failed": failed}


class HostMemory:
    """Each worker host's peak memory during the sweep: the resident memory of all its processes (the
    Celery worker, its chunk steps' threads, their fetching and parsing processes) added up, sampled every
    ``every`` seconds in a thread. A host is one namespace, so its processes are ``Cluster.pids``."""

    def __init__(self, cluster: netns.Cluster, hosts: list[str], every: float = 0.5) -> None:
        self.cluster, self.hosts, self.every = cluster, hosts, every
        self.peak_mb = dict.fromkeys(hosts, 0.0)
        self.processes = dict.fromkeys(hosts, 0)  # processes on the host at its peak
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="host-memory", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            for host in self.hosts:
                pids = self.cluster.pids(host)
                total = sum(status_kb(pid, "VmRSS") for pid in pids) / 1024
                if total > self.peak_mb[host]:
                    self.peak_mb[host], self.processes[host] = total, len(pids)

    def __enter__(self) -> HostMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sweep(workers: int, args: argparse.Namespace, root: Path) -> dict:
    names = ["a", "b", "c"][:workers]
    shop = multihost.Shop()
    with netns.cluster(root / f"hosts-{workers}", workers=names, site_hosts=args.site_hosts) as cluster:
        count = len(cluster.site_addresses)
        latency = {a: 0.1 + 0.3 * i / max(1, count - 1) for i, a in enumerate(cluster.site_addresses)}
        plans = {a: HostPlan(latency_s=latency[a], page=shop.page) for a in cluster.site_addresses}
        with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns)) as site:
            targets = multihost.dealt_targets(site, cluster.site_addresses, args.targets)
            contracts = root / f"contracts-{workers}"
            multihost.write_contract(contracts, "shop", targets, args.concurrency)
            pages = collections.Counter(url.split("/")[2].split(":")[0] for url in targets.values())
            bound = max(pages[a] * latency[a] / args.concurrency for a in cluster.site_addresses)
            db, admin = _database()
            try:
                chunks = str(args.chunks)
                with multihost.deployment(cluster, db, contracts, SCRAPE_CONTRACTS_CHUNKS=chunks) as d:
                    for name in names:
                        d.start_worker(name, concurrency=args.worker_concurrency)
                    d.start_daemon()
                    netns.wait_until("the workers ready", lambda: all(d.worker_ready(n) for n in names), 180)
                    observer = root / f"observer-{workers}"
                    observer.mkdir()
                    (observer / "dagster.yaml").write_text(
                        f"storage:\n  postgres:\n    postgres_url: {db!r}\n")
                    store = sa.create_engine(db)
                    with dg.DagsterInstance.from_config(str(observer)) as instance, \
                            HostMemory(cluster, [n for n in names if not args.faults]) as memory:
                        load_before = os.getloadavg()
                        started = time.monotonic()
                        if args.faults:
                            midway = faults.Midway(d, instance, site, store, "shop", args.targets, args.fault_at)
                            running = d.start_sweep("shop", "bench", timeout=7200)
                            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # wall: the command's own
                                faulting = pool.submit(midway.run)
                                code = running.wait()
                                wall = time.monotonic() - started
                                faulting.result()
                            out = d.log(netns.CONTROL, "sweep-bench").read_text(errors="replace")
                            done = subprocess.CompletedProcess(running.args, code, out, "")
                        else:
                            done = d.sweep("shop", "bench", timeout=3600)
                            wall = time.monotonic() - started
                        load_after = os.getloadavg()
                        if done.returncode != 0:
                            raise SystemExit(f"the sweep failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
                        batch_runs = dg.RunsFilter(job_name="scrape_shop_batch_job")
                        records = instance.get_run_records(filters=batch_runs)
                        span = max(r.end_time or 0 for r in records) - min(r.start_time or 0 for r in records)
                        run_ids = [r.dagster_run.run_id for r in records]
                        fault = _fault_figures(midway, instance, store, run_ids, targets) if args.faults else {}
                    with store.connect() as conn:
                        accepted = conn.execute(sa.text(
                            "select count(distinct partition) from sc_accepted")).scalar()
                    store.dispose()
            finally:
                _drop(db, admin)
            clients = {cluster.hosts[n].address: n for n in names}
            shares = collections.Counter(clients.get(s.client, s.client) for s in site.requests()
                                         if s.path.startswith("/p/"))
            peaks = {a.rsplit(".", 1)[1]: site.peak(a) for a in cluster.site_addresses}
            peak = max(peaks.values())
    return {"workers": workers, "bound": bound, "wall": wall, "runs": span, "accepted": accepted,
            "peaks": peaks, "faults": fault,
            "memory": {n: (round(memory.peak_mb[n]), memory.processes[n]) for n in memory.hosts},
            "shares": dict(sorted(shares.items())), "peak": peak, "load": (load_before, load_after),
            "summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""}


def _print_faults(figures: dict) -> list[str]:
    for key in ("lost", "twice", "unrecorded", "recorded twice"):
        print(f"  targets {key}: {len(figures[key])} {figures[key][:10]}", flush=True)
    print(f"  chunks handed on: {figures['handed on']}", flush=True)
    print(f"  the frozen host's commits refused by the fencing tokens: {figures['refused']} (of "
          f"{figures['taken over']} targets taken over from it); lease_lost observations in all the runs: "
          f"{figures['lease_lost in all']}; its attempt's step failures: "
          f"{[m[:300] for m in figures['stale failures']]}", flush=True)
    for check in figures["failed"]:
        print(f"  CHECK FAILED: {check}", flush=True)
    return list(figures["failed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2,3", help="worker host counts to sweep with: 1,2,3 or 3")
    parser.add_argument("--site-hosts", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4, help="fetch.concurrency (per site host)")
    parser.add_argument("--chunks", type=int, default=6, help="chunk steps per batched run")
    parser.add_argument("--worker-concurrency", type=int, default=1, help="the Celery worker's --concurrency on each host (a worker process still runs its chunk steps "
                             "one at a time: docs/scale.md)")
    parser.add_argument("--faults", action="store_true",
                        help="midway (--fault-at of the targets recorded), SIGKILL every process of host a and "
                             "SIGSTOP host c's until its leases ran out and were taken over, then SIGCONT it; "
                             "check nothing was lost or accepted twice and c's late commits were refused")
    parser.add_argument("--fault-at", type=float, default=0.3, help="share of targets recorded before the faults")
    args = parser.parse_args()
    if args.faults and args.workers != "3":
        parser.error("--faults needs --workers 3 (a killed host, a frozen one and one that goes on)")
    for sig in (signal.SIGTERM, signal.SIGINT):  # stopped (a background run too): the hosts and database go
        signal.signal(sig, lambda number, _frame: sys.exit(128 + number))
    reason = netns.unavailable_reason()
    if reason is not None:
        raise SystemExit(f"cannot make hosts here: {reason}")
    print(f"{args.targets} targets on {args.site_hosts} site hosts (100-400 ms each), fetch.concurrency "
          f"{args.concurrency}, {args.chunks} chunks per run, {os.cpu_count()} cores", flush=True)
    results = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sc-multihost-") as tmp:
        for workers in [int(w) for w in args.workers.split(",")]:
            result = sweep(workers, args, Path(tmp))
            results.append(result)
            print(f"{workers} host(s): wall {result['wall']:.1f} s, runs {result['runs']:.1f} s, bound "
                  f"{result['bound']:.1f} s -> ratio {result['bound'] / result['wall']:.3f} (wall), "
                  f"{result['bound'] / result['runs']:.3f} (runs); {result['accepted']} accepted; shares "
                  f"{result['shares']}; max in flight per site host {result['peak']} "
                  f"(limit {args.concurrency}); "
                  f"load {result['load'][0][0]:.1f} -> {result['load'][1][0]:.1f}", flush=True)
            print(f"  {result['summary']}", flush=True)
            print(f"  max in flight per site host (by its last address byte): {result['peaks']}", flush=True)
            if result["memory"]:  # not with --faults: a killed host's processes are gone, a frozen one's idle
                print("  peak memory per worker host (all its processes, MB; processes then): " + ", ".join(
                    f"{n} {mb} ({count})" for n, (mb, count) in result["memory"].items()), flush=True)
            if result["faults"]:
                failed += _print_faults(result["faults"])
    if len(results) > 1:
        base = results[0]
        for result in results[1:]:
            print(f"{result['workers']} vs {base['workers']} host(s): "
                  f"speed-up {base['wall'] / result['wall']:.2f} "
                  f"(wall), {base['runs'] / result['runs']:.2f} (runs)")
    if failed:
        raise SystemExit("FAILED: " + "; ".join(failed))


if __name__ == "__main__":
    main()
