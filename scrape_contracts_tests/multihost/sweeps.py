"""What the multi-host tests run and read: sweeps on a deployment, the per-partition story of a sweep (from
the instance's event log and the project store), the same sweep on one machine, which host asked the site."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostsSite

# fetch.concurrency of the tests' contracts: requests in flight per site host, all worker hosts together
CONCURRENCY = 2
_RUN_ID = re.compile(r"(?:queued run|already started with this key: run) ([0-9a-f-]{36})")
_STORY = {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION,
          dg.DagsterEventType.ASSET_OBSERVATION}

Story = dict[str, tuple[Any, ...]]  # partition → its events and its candidate's outcome and status


class Sweep:
    """Sweeps on ``deployment``: its workers, its daemon, its instance read from this process."""

    def __init__(self, deployment: multihost.Deployment) -> None:
        self.deployment = deployment
        observer = deployment.cluster.hosts[netns.CONTROL].home / "observer"
        observer.mkdir(exist_ok=True)
        (observer / "dagster.yaml").write_text(
            f"storage:\n  postgres:\n    postgres_url: {deployment.db_url!r}\ntelemetry:\n  enabled: false\n")
        self.instance = dg.DagsterInstance.from_config(str(observer))

        self.started = time.monotonic()
        self.phases: list[tuple[str, float]] = []  # what took how long: said when the test fails

    def phase(self, what: str) -> None:
        self.phases.append((what, round(time.monotonic() - self.started, 1)))
        print(f"{self.phases[-1][1]:7.1f} s  {what}", flush=True)

    def workers_up(self, *hosts: str, heartbeat: int | None = None) -> None:
        for host in hosts:
            self.deployment.start_worker(host, heartbeat=heartbeat)
        if self.deployment.daemon is None:
            self.deployment.start_daemon()
        for host in hosts:
            netns.wait_until(f"host {host}'s worker ready", lambda h=host: self.deployment.worker_ready(h),
                             120)
        self.phase(f"workers {', '.join(hosts)} ready")

    def run(self, contract: str, key: str, *, expect_ok: bool = True) -> list[str]:
        """Every target of ``contract`` as queued batched runs; their run ids once they ended."""
        done = self.deployment.sweep(contract, key, timeout=300)
        run_ids = _RUN_ID.findall(done.stdout)
        if expect_ok and (done.returncode != 0 or not run_ids):
            daemon = self.deployment.log(netns.CONTROL, "daemon")
            raise AssertionError(f"sweep {key} of {contract} failed ({done.returncode}):\n{done.stdout}\n"
                                 f"{done.stderr[-3000:]}\n"
                                 f"daemon: {daemon.read_text()[-3000:] if daemon.exists() else ''}")
        self.phase(f"sweep {key} of {contract} done")
        return run_ids


def page_clients(site: HostsSite, prefix: str) -> collections.Counter[str]:
    """How many pages under ``prefix`` each client address asked for."""
    return collections.Counter(s.client for s in site.requests() if s.path.startswith(prefix))


def _story(instance: dg.DagsterInstance, run_ids: list[str], outcomes: dict[str, tuple[str, str]]) -> Story:
    events: dict[str, list[tuple[str, ...]]] = collections.defaultdict(list)
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type=_STORY):
            event = entry.dagster_event
            assert event is not None
            if event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                check = event.event_specific_data
                if check.partition is not None:
                    events[check.partition].append(("check", check.check_name, str(check.passed)))
                continue
            data = entry.asset_materialization or entry.asset_observation
            if data is None or data.partition is None:
                continue  # the batch summary: one per run, whatever the chunks
            kind = "materialization" if entry.asset_materialization else "observation"
            stage = data.metadata.get("stage")
            events[data.partition].append((kind, data.asset_key.to_user_string(),
                                           str(stage.value) if stage is not None else ""))
    return {p: (tuple(sorted(events.get(p, []))), outcomes.get(p)) for p in set(events) | set(outcomes)}


def _outcomes(db_url: str, contract: str) -> dict[str, tuple[str, str]]:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return {p: (o, s) for p, o, s in conn.execute(sa.text(
                "select partition, outcome, status from sc_candidates where contract = :c"), {"c": contract})}
    finally:
        engine.dispose()


def multihost_events(instance: dg.DagsterInstance, db_url: str, contract: str, run_ids: list[str]) -> Story:
    return _story(instance, run_ids, _outcomes(db_url, contract))


class SingleMachine:
    """The sweep of a contract on one machine, in a process of its own while the hosts start: its one-step
    batched job (in-process executor), a SQLite instance and store, pages in a local folder. It asks the site
    from the root namespace (the bridge's address), which tells its requests from the hosts'."""

    def __init__(self, contracts: Path, contract: str, home: Path) -> None:
        home.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPE_CONTRACTS_", "DAGSTER_"))}
        env.update(DAGSTER_HOME=str(home),
                   SCRAPE_CONTRACTS_DB_URL=f"sqlite:///{home / 'scrape_contracts.db'}",
                   SCRAPE_CONTRACTS_ARTIFACTS_DIR=str(home / "artifacts"), PYTHONPATH=str(multihost.REPO))
        self.process = subprocess.Popen([sys.executable, "-m", "scrape_contracts_tests.multihost.sweeps",
                                         str(contracts), contract], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=multihost.REPO)

    def story(self, timeout: float = 300) -> Story:
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, err[-3000:]
        return {p: (tuple(tuple(e) for e in events), tuple(outcome) if outcome else None)
                for p, (events, outcome) in json.loads(out).items()}


def _one_machine(contracts: Path, contract: str) -> Story:
    from scrape_contracts import settings
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.names import batch_job_name

    with dg.instance_for_test(temp_dir=str(settings.dagster_home())) as instance:
        job = build_definitions(contracts).resolve_job_def(batch_job_name(contract))
        result = job.execute_in_process(instance=instance, raise_on_error=False, run_config={
            "ops": {f"{contract}_scrape_batch": {"config": {"partitions": []}}}})
        assert result.success
        return _story(instance, [result.run_id], _outcomes(settings.db_url(), contract))


if __name__ == "__main__":
    print(json.dumps(_one_machine(Path(sys.argv[1]), sys.argv[2])))
