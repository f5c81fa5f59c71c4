"""Faults on a multi-host sweep (``multihost.py``, ``netns.py``) and what they leave in the records: a worker
host switched off (every process SIGKILLed) or frozen (SIGSTOP) and revived (SIGCONT), the accepted
versions in the project store, the chunk attempts and the observations in the runs' event logs.

Used by ``scrape_contracts_tests/multihost/test_multihost_faults.py`` (its pages held by the site, so the
faults land while each host is midway through a chunk) and ``benchmarks/multihost.py --faults`` (the faults
once a share of the sweep is recorded: ``Midway``).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import signal
import time
from dataclasses import dataclass, field
from typing import Protocol

import dagster as dg
import sqlalchemy as sa

from scrape_contracts.testing import multihost, netns
from scrape_contracts.testing.hosts_site import HostsSite

WAIT_BOUND_S = 3600.0  # a bound for a broken run, not a timing: every wait here is on what happened


def accepted_ids(engine: sa.Engine) -> dict[str, list[int]]:
    """partition → the ids of its accepted versions, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("select partition, id from sc_accepted order by id")).all()
    found: dict[str, list[int]] = collections.defaultdict(list)
    for partition, row_id in rows:
        found[partition].append(row_id)
    return dict(found)


def candidate_counts(engine: sa.Engine, contract: str) -> dict[str, int]:
    """partition → how many candidates the store recorded for it (one per scrape of the target)."""
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "select partition, count(*) from sc_candidates where contract = :c group by partition"),
            {"c": contract}).all())


def chunk_attempts(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, list[str]]:
    """Chunk step → the Celery workers (``host-<name>``) given it, in order (a chunk handed on has two), from
    dagster-celery's engine events."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            event = entry.dagster_event
            worker = event.engine_event_data.metadata.get("Celery worker") if event is not None else None
            if worker is not None and event.step_key:
                found[event.step_key].append(str(worker.value).split("@", 1)[0])
    return dict(found)


def chunk_workers(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, str]:
    """Chunk step → the Celery worker that ran it last."""
    return {step: workers[-1] for step, workers in chunk_attempts(instance, run_ids).items()}


def observations(instance: dg.DagsterInstance, run_ids: list[str], stage: str) -> list[tuple[str, str, str]]:
    """(step, partition, reason) of every observation of ``stage`` in the runs."""
    found = []
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION):
            data = entry.asset_observation
            if data is not None and (s := data.metadata.get("stage")) is not None and s.value == stage:
                reason = data.metadata.get("reason")
                found.append((entry.step_key or "", data.partition or "",
                              str(reason.value if reason else "")))
    return found


def switch_off(deployment: multihost.Deployment, host: str) -> None:
    """Every process of ``host`` SIGKILLed at once (a machine switched off); returns once they are gone."""
    deployment.cluster.signal(host, signal.SIGKILL)
    deployment.stop_worker(host, signal.SIGKILL)  # reaps the worker's CLI, waits until the host is empty


class Signals(Protocol):
    """What freezing and reviving a host needs of ``netns.Cluster``: a signal to every process of a host."""

    def signal(self, host: str, sig: int) -> list[int]: ...


def freeze(cluster: Signals, host: str) -> list[int]:
    """Every process of ``host`` SIGSTOPped (a frozen machine); returns once all of them are stopped."""
    frozen = cluster.signal(host, signal.SIGSTOP)
    netns.wait_until(f"host {host} stopped", lambda: all(netns.stopped(p) for p in frozen), 60)
    return frozen


def _sessions(store: sa.Engine, host: str, *states: str) -> int:
    """How many database sessions of ``host`` (their application_name, ``multihost.Deployment``) are in one of
    ``states`` (pg_stat_activity's), or in anything but ``idle`` if none is given."""
    where = "state in :states" if states else "state <> 'idle'"
    query = sa.text(f"select count(*) from pg_stat_activity where application_name = :a and {where}")
    if states:
        query = query.bindparams(sa.bindparam("states", expanding=True))
    with store.connect() as conn:
        return conn.execute(query, {"a": f"host-{host}", **({"states": list(states)} if states else {})}
                            ).scalar() or 0


def wait_until_sessions(store: sa.Engine, host: str, timeout: float = 60) -> None:
    """Until ``host`` has a database session (its processes have connected)."""
    netns.wait_until(f"a database session of host {host}", lambda: _sessions(store, host, "idle", "active",
                     "idle in transaction"), timeout)


def in_transaction(store: sa.Engine, host: str) -> bool:
    """Whether a database session of ``host`` is in a statement or a transaction now."""
    return bool(_sessions(store, host))


def freeze_between_transactions(cluster: Signals, store: sa.Engine, host: str, timeout: float = 300) -> bool:
    """``freeze`` with none of ``host``'s database sessions in a transaction, so that it wakes to commit with
    its stale tokens (frozen inside one, it wakes to find that transaction ended by the server and its step
    failed, ``test_store_frozen_client.py``); False if no such freeze came within ``timeout`` (frozen anyway).

    Checked after the freeze, not only before: the check and the signal are two steps, and the host may
    open a transaction between them. A statement it had sent still finishes on the server; what is then left open is
    a transaction the frozen host holds, and the host is revived and frozen again at another moment."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(TimeoutError):
            netns.wait_until(f"host {host} between transactions", lambda: not in_transaction(store, host),
                             max(0.1, deadline - time.monotonic()), every=0.02)
        freeze(cluster, host)
        with contextlib.suppress(TimeoutError):
            netns.wait_until(f"host {host}'s last statement done", lambda: not _sessions(store, host, "active"),
                             60)
        if not in_transaction(store, host):
            return True
        if time.monotonic() >= deadline:
            return False
        thaw(cluster, host)


def thaw(cluster: Signals, host: str) -> None:
    """Every process of ``host`` SIGCONTed (a frozen machine revived)."""
    cluster.signal(host, signal.SIGCONT)


def chunk_step(contract: str, holder: str) -> tuple[str, str]:
    """(run id, step key) of a chunk attempt's lease holder ``<run id>/<chunk>/<attempt>``."""
    run_id, chunk, _ = holder.split("/")
    return run_id, f"{contract}_scrape_chunk[{chunk}]"


def _last_cause(error: object) -> str:
    """The innermost cause of a step failure's serialised error: what went wrong, not Dagster's wrapper."""
    while getattr(error, "cause", None) is not None:
        error = error.cause  # type: ignore[attr-defined]
    return str(getattr(error, "message", "")).strip()


def step_story(instance: dg.DagsterInstance, run_ids: list[str], step: str, last: int = 30) -> list[str]:
    """The last events of ``step`` in the runs, a line each (what a failed fault test says it did)."""
    lines = []
    for run_id in run_ids:
        for entry in instance.all_logs(run_id):
            event = entry.dagster_event
            if entry.step_key != step or event is None:
                continue
            detail = entry.user_message or ""
            if event.event_type == dg.DagsterEventType.STEP_FAILURE and event.step_failure_data is not None:
                detail = _last_cause(event.step_failure_data.error)
            lines.append(f"{event.event_type_value}: {detail[:200]}")
    return lines[-last:]


@dataclass
class Midway:
    """Once ``fraction`` of the contract's targets are recorded, and ``killed`` and ``frozen`` each hold a
    chunk: ``killed`` switched off, ``frozen`` frozen until its chunk's leases have run out by the store's
    clock (longer than the lease) and the chunk's attempt on another host has taken them over, then revived.
    ``refusals()`` then waits until the revived attempt's commits have been refused, one per target it held."""

    deployment: multihost.Deployment
    instance: dg.DagsterInstance
    site: HostsSite
    store: sa.Engine
    contract: str
    targets: int
    fraction: float
    killed: str = "a"
    frozen: str = "c"
    said: list[str] = field(default_factory=list)  # what happened when, for the report
    killed_holder: str = ""  # the switched-off host's chunk attempt
    stale_holder: str = ""  # the frozen host's chunk attempt
    stale_leases: int = 0  # its targets taken over while it was frozen: each of its commits for them is refused

    def _say(self, what: str) -> None:
        self.said.append(what)
        print(f"  faults: {what}", flush=True)

    def _recorded(self) -> int:
        with self.store.connect() as conn:
            return conn.execute(sa.text("select count(distinct partition) from sc_candidates where contract = :c"),
                                {"c": self.contract}).scalar() or 0

    def _live_holder(self, host: str) -> str | None:
        """The chunk attempt ``host`` is working on: the live holder of the targets it fetched last."""
        address = self.deployment.cluster.hosts[host].address
        recent = [f"p{s.path[3:]}" for s in self.site.requests() if s.client == address
                  and s.path.startswith("/p/")][-20:]
        if not recent:
            return None
        with self.store.connect() as conn:
            holders = conn.execute(sa.text(
                "select holder from sc_leases where contract = :c and partition in :ps and expires_at > now() "
                "group by holder order by max(taken_at) desc").bindparams(sa.bindparam("ps", expanding=True)),
                {"c": self.contract, "ps": recent}).scalars().all()
        return holders[0] if holders else None

    def _leases_of(self, holder: str) -> list[tuple[str, dt.datetime]]:
        with self.store.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.text(
                "select partition, expires_at from sc_leases where holder = :h and expires_at > now()"),
                {"h": holder})]

    def run(self) -> None:
        share = int(self.targets * self.fraction)
        recorded = netns.wait_until(f"{share} targets recorded", lambda: self._recorded() >= share and
                                    self._recorded(), WAIT_BOUND_S, every=1.0)
        holders = netns.wait_until(
            f"hosts {self.killed} and {self.frozen} each working on a chunk",
            lambda: (h := (self._live_holder(self.killed), self._live_holder(self.frozen)))[0] and h[1] and h,
            WAIT_BOUND_S, every=1.0)
        self.killed_holder = holders[0]
        switch_off(self.deployment, self.killed)
        if not freeze_between_transactions(self.deployment.cluster, self.store, self.frozen):
            self._say(f"host {self.frozen} never between transactions in 300 s: frozen in one")
        self._say(f"{recorded} of {self.targets} targets recorded; host {self.killed} ({holders[0]}) switched "
                  f"off, host {self.frozen} ({holders[1]}) frozen")
        self.stale_holder = holders[1]
        held = self._leases_of(self.stale_holder)
        until = max((expires for _, expires in held), default=None)
        partitions = [p for p, _ in held]

        run_id, _ = chunk_step(self.contract, self.stale_holder)

        def run_out_and_run_ended() -> bool:
            # the run's end too, not only the takeover: dagster-celery takes the first result a chunk's task
            # sends, so the revived attempt's result must not come before the one of the attempt that took over
            with self.store.connect() as conn:
                if until is not None and conn.execute(sa.text("select now() <= :t"), {"t": until}).scalar():
                    return False
            run = self.instance.get_run_by_id(run_id)
            return run is not None and run.is_finished

        netns.wait_until(f"host {self.frozen}'s {len(held)} leases run out and its chunk's run ended",
                         run_out_and_run_ended, WAIT_BOUND_S, every=2.0)
        with self.store.connect() as conn:
            self.stale_leases = conn.execute(sa.text(
                "select count(*) from sc_leases l where l.contract = :c and l.partition in :ps and "
                "l.holder <> :h").bindparams(sa.bindparam("ps", expanding=True)),
                {"c": self.contract, "ps": partitions or [""], "h": self.stale_holder}).scalar() or 0
        self._say(f"host {self.frozen}'s {len(held)} leases (until {until}) run out, {self.stale_leases} of "
                  f"them taken over, its chunk's run ended; {self._recorded()} targets recorded; host "
                  f"{self.frozen} revived")
        thaw(self.deployment.cluster, self.frozen)

    def stale_ending(self, timeout: float = 1200.0) -> tuple[list[tuple[str, str, str]], list[str]]:
        """How the revived attempt ended: its refused commits (``lease_lost`` on its chunk step: one for every
        target taken over from it, they come a commit at a time) and its step's failures (the server ended the
        transaction it was frozen in, so its connection is gone), once either is complete, or what there is
        after ``timeout``."""
        if not self.stale_holder:
            return [], []
        run_id, step = chunk_step(self.contract, self.stale_holder)

        def ending() -> tuple[list[tuple[str, str, str]], list[str]]:
            refused = [o for o in observations(self.instance, [run_id], "lease_lost") if o[0] == step]
            failed = [_last_cause(e.dagster_event.step_failure_data.error) if e.dagster_event else ""
                      for e in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
                      if e.step_key == step]
            return refused, failed

        def ended() -> tuple[list[tuple[str, str, str]], list[str]] | None:
            refused, failed = found = ending()
            return found if failed or len(refused) >= max(1, self.stale_leases) else None

        try:
            return netns.wait_until(f"the end of {self.stale_holder}", ended, timeout, every=2.0)
        except TimeoutError:
            return ending()
