"""Provider jobs: the submit marker, the job id recorded before the first poll, spend, and reconciliation.

A target of a provider contract asks the provider for a job in three commits: ``begin_submit`` writes a
``submitting`` marker (after checking the contract's cost budget, in the same transaction), the submit goes
out, and ``job_submitted`` records the provider's job id before anything polls it. A marker still without a
job id when a run looks again means a run died, or lost the answer, between the provider accepting a job and
this store learning its id: ``mark_indeterminate`` pauses the target with that reason (and an outbox event) in
one transaction, and nothing submits for it until a person ``adopt_job``s the job the provider did run or
``abandon_submission``s it. Never a silent second job, never a second charge.

These writes are not fenced by the target's lease: a job id is a fact about the provider that must be kept
whichever run learned it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrape_contracts.adapters import outbox
from scrape_contracts.adapters.schema import partition_state, provider_jobs, repair_proposals
from scrape_contracts.adapters.statuses import OutboxKind, ProviderJobState
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.errors import StoreError
from scrape_contracts.adapters.store.rows import utc_now
from scrape_contracts.adapters.store.state import lock_partition, write_state

# the pause reason of a target whose submission is indeterminate starts with this
INDETERMINATE_PAUSE = "indeterminate"
OPEN_STATES = (ProviderJobState.SUBMITTING, ProviderJobState.SUBMITTED, ProviderJobState.INDETERMINATE)
MICROS = 1_000_000


class BudgetSpent(StoreError):
    """The contract's cost budget for this period is spent: nothing was submitted."""


class NothingToReconcile(StoreError):
    """The target has no submission without a job id."""


@dataclass(frozen=True)
class ProviderJob:
    id: int
    contract: str
    partition: str
    url: str
    run_id: str
    sweep: str
    state: ProviderJobState
    job_id: str | None
    cost: float | None
    polls: int
    error: str | None
    note: str | None
    submitting_at: dt.datetime
    updated_at: dt.datetime

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


@dataclass(frozen=True)
class Budget:
    """A cost budget: ``amount`` per UTC day, or per ``sweep`` (the sweep being this one)."""

    amount: float
    per: str  # day | sweep
    currency: str = "USD"

    def describe(self, spent: float) -> str:
        period = "today (UTC)" if self.per == "day" else "in this sweep"
        return f"{spent:.4g} of {self.amount:.4g} {self.currency} spent {period}"


@dataclass(frozen=True)
class Spend:
    total: float  # jobs and repairs
    jobs: int
    unknown: int  # jobs whose cost the provider never told (an indeterminate submission)
    repairs: int = 0  # repairs asked (adapters/store/repairs.py), their cost in ``total``


def _job(row: Any) -> ProviderJob:
    cost = None if row.cost_micros is None else row.cost_micros / MICROS
    return ProviderJob(row.id, row.contract, row.partition, row.url, row.run_id, row.sweep,
                       ProviderJobState(row.state), row.job_id, cost, row.polls or 0, row.error, row.note,
                       row.submitting_at, row.updated_at)


def day_start(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


class ProviderJobsMixin(Connected):
    def open_job(self, contract: str, partition: str) -> ProviderJob | None:
        """The target's job in flight: submitting, submitted (polling) or indeterminate; None if none."""
        with self.engine.connect() as conn:
            return _open(conn, contract, partition)

    def provider_jobs(self, contract: str, partition: str | None = None, *, run_id: str | None = None
                      ) -> list[ProviderJob]:
        query = sa.select(provider_jobs).where(provider_jobs.c.contract == contract)
        if partition is not None:
            query = query.where(provider_jobs.c.partition == partition)
        if run_id is not None:
            query = query.where(provider_jobs.c.run_id == run_id)
        with self.engine.connect() as conn:
            return [_job(r) for r in conn.execute(query.order_by(provider_jobs.c.id)).all()]

    def indeterminate_targets(self, contract: str) -> dict[str, ProviderJob]:
        """partition → its submission without a job id, for every indeterminate target of the contract."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(provider_jobs).where(
                provider_jobs.c.contract == contract,
                provider_jobs.c.state == ProviderJobState.INDETERMINATE).order_by(provider_jobs.c.id)).all()
        return {r.partition: _job(r) for r in rows}

    def begin_submit(self, contract: str, partition: str, url: str, *, run_id: str, sweep: str,
                     budget: Budget | None = None) -> ProviderJob:
        """Write the ``submitting`` marker, after the budget check, in one transaction (one at a time per
        contract: two runs cannot both take the budget's last job). ``BudgetSpent`` when the next job would
        pass the budget; ``StoreError`` when the target has a job in flight already."""
        now = self.clock()
        with self._tx() as conn:
            _lock_contract(conn, contract)
            found = _open(conn, contract, partition)
            if found is not None:
                raise StoreError(f"target {contract}/{partition} has provider job "
                                 f"{found.job_id or '(no id)'} {found.state} already: poll it, or "
                                 "reconcile it")
            if budget is not None:
                spent = _spent(conn, contract, sweep=sweep if budget.per == "sweep" else None,
                               since=day_start(now) if budget.per == "day" else None)
                price = _last_price(conn, contract)
                if spent.total + price > budget.amount + 1e-9:
                    until = "the next UTC day" if budget.per == "day" else "the next sweep"
                    next_job = f", and the next job costs about {price:.4g}" if price else ""
                    raise BudgetSpent(f"cost budget spent: {budget.describe(spent.total)}{next_job}; nothing "
                                      "was submitted (raise fetch.provider.budget.amount, or wait for "
                                      f"{until})")
            row = conn.execute(provider_jobs.insert().values(
                contract=contract, partition=partition, url=url, run_id=run_id, sweep=sweep,
                state=ProviderJobState.SUBMITTING, polls=0, submitting_at=now, updated_at=now
            ).returning(*provider_jobs.c)).one()
        return _job(row)

    def job_submitted(self, row_id: int, job_id: str, cost: float | None) -> ProviderJob:
        """The provider's job id (and what it charged), recorded before the job is polled."""
        return self._update(row_id, state=ProviderJobState.SUBMITTED, job_id=job_id,
                            cost_micros=_micros(cost))

    def submit_not_sent(self, row_id: int, error: str) -> ProviderJob:
        """The submit never reached the provider, or it answered with no job: nothing made or charged."""
        return self._update(row_id, state=ProviderJobState.ABANDONED, error=error, cost_micros=0,
                            note="no job: the submit was not sent, or the provider refused it")

    def job_polled(self, row_id: int, polls: int) -> None:
        self._update(row_id, polls=polls)

    def job_finished(self, row_id: int, *, done: bool, cost: float | None, error: str | None = None,
                     polls: int | None = None) -> ProviderJob:
        state = ProviderJobState.DONE if done else ProviderJobState.FAILED
        values: dict[str, Any] = {"state": state, "error": error}
        if cost is not None:
            values["cost_micros"] = _micros(cost)
        if polls is not None:
            values["polls"] = polls
        return self._update(row_id, **values)

    def mark_indeterminate(self, row_id: int, reason: str) -> ProviderJob:
        """The marker has no job id and nobody will learn it: indeterminate, and the target paused with
        ``reason`` (starting with INDETERMINATE_PAUSE) and a ``paused`` event, in one transaction."""
        with self._tx() as conn:
            row = conn.execute(sa.select(provider_jobs).where(provider_jobs.c.id == row_id)).one()
            conn.execute(provider_jobs.update().where(provider_jobs.c.id == row_id).values(
                state=ProviderJobState.INDETERMINATE, error=reason, updated_at=self.clock()))
            state = conn.execute(sa.select(partition_state.c.pause_reason).where(
                partition_state.c.contract == row.contract, partition_state.c.partition == row.partition,
                partition_state.c.paused.is_(True))).first()
            if state is None or not (state.pause_reason or "").startswith(INDETERMINATE_PAUSE):
                lock_partition(conn, row.contract, row.partition)
                write_state(conn, row.contract, row.partition, paused=True, pause_reason=reason)
                number = outbox.next_pause_number(conn, row.contract, row.partition)
                outbox.write(conn, OutboxKind.PAUSED, [(row.contract, row.partition, number,
                                                        {"reason": reason, "cause": "indeterminate"})])
            return _job(conn.execute(sa.select(provider_jobs).where(provider_jobs.c.id == row_id)).one())

    def adopt_job(self, contract: str, partition: str, job_id: str, *, note: str) -> ProviderJob:
        """Give the target's submission without a job id the job the provider did run, and resume the target
        (its next scrape polls that job and no other)."""
        return self._reconcile(contract, partition, note, state=ProviderJobState.SUBMITTED, job_id=job_id)

    def abandon_submission(self, contract: str, partition: str, *, note: str) -> ProviderJob:
        """Give up the target's submission without a job id and resume it (its next scrape submits anew)."""
        return self._reconcile(contract, partition, note, state=ProviderJobState.ABANDONED)

    def provider_spend(self, contract: str, *, run_id: str | None = None, sweep: str | None = None,
                       since: dt.datetime | None = None) -> Spend:
        with self.engine.connect() as conn:
            return _spent(conn, contract, run_id=run_id, sweep=sweep, since=since)

    def budget_left(self, contract: str, budget: Budget, *,
                    sweep: str | None = None) -> tuple[Spend, str | None]:
        """(the period's spend, the reason the contract is paused for its budget or None)."""
        since = day_start(self.clock()) if budget.per == "day" else None
        with self.engine.connect() as conn:
            spent = _spent(conn, contract, sweep=sweep if budget.per == "sweep" else None, since=since)
            price = _last_price(conn, contract)
        if budget.per == "sweep" and sweep is None:
            return spent, None
        spent_out = spent.total + price > budget.amount + 1e-9
        return spent, f"cost budget spent: {budget.describe(spent.total)}" if spent_out else None

    # -------------------------------------------------------------------------------------------
    def _update(self, row_id: int, **values: Any) -> ProviderJob:
        with self._tx() as conn:
            conn.execute(provider_jobs.update().where(provider_jobs.c.id == row_id).values(
                updated_at=self.clock(), **values))
            return _job(conn.execute(sa.select(provider_jobs).where(provider_jobs.c.id == row_id)).one())

    def _reconcile(self, contract: str, partition: str, note: str, **values: Any) -> ProviderJob:
        with self._tx() as conn:
            lock_partition(conn, contract, partition)
            found = _open(conn, contract, partition)
            if found is None or found.job_id is not None:
                what = (f"its provider job {found.job_id} is known ({found.state})" if found is not None
                        else "it has no provider submission in flight")
                raise NothingToReconcile(f"nothing to reconcile for {contract}/{partition}: {what}; "
                                         "reconcile is for a target paused as indeterminate")
            conn.execute(provider_jobs.update().where(provider_jobs.c.id == found.id).values(
                note=note, updated_at=self.clock(), **values))
            # the indeterminate pause ends with it; a pause of another kind (by hand, for review) stays
            conn.execute(partition_state.update().where(
                partition_state.c.contract == contract, partition_state.c.partition == partition,
                partition_state.c.paused.is_(True),
                partition_state.c.pause_reason.like(f"{INDETERMINATE_PAUSE}%"),
            ).values(paused=False, pause_reason=None, updated_at=utc_now()))
            return _job(conn.execute(sa.select(provider_jobs).where(provider_jobs.c.id == found.id)).one())


def _open(conn: Connection, contract: str, partition: str) -> ProviderJob | None:
    row = conn.execute(sa.select(provider_jobs).where(
        provider_jobs.c.contract == contract, provider_jobs.c.partition == partition,
        provider_jobs.c.state.in_(list(OPEN_STATES))).order_by(provider_jobs.c.id.desc()).limit(1)).first()
    return None if row is None else _job(row)


def _lock_contract(conn: Connection, contract: str) -> None:
    # SQLite: BEGIN IMMEDIATE holds the whole store already; PostgreSQL: one lock per contract's budget
    if conn.dialect.name == "postgresql":
        key = sa.func.hashtext(f"sc_provider_budget:{contract}")
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def _spent(conn: Connection, contract: str, *, run_id: str | None = None, sweep: str | None = None,
           since: dt.datetime | None = None) -> Spend:
    # jobs: those the provider gave an id; unknown: submissions without one whose cost nobody knows (in
    # flight, or indeterminate); a submit that made no job has cost 0 and is neither
    jobs = provider_jobs.c
    query = sa.select(sa.func.coalesce(sa.func.sum(jobs.cost_micros), 0),
                      sa.func.count().filter(jobs.job_id.is_not(None)),
                      sa.func.count().filter(jobs.job_id.is_(None), jobs.cost_micros.is_(None))
                      ).where(jobs.contract == contract)
    if run_id is not None:
        query = query.where(provider_jobs.c.run_id == run_id)
    if sweep is not None:
        query = query.where(provider_jobs.c.sweep == sweep)
    if since is not None:
        query = query.where(provider_jobs.c.submitting_at >= since)
    total, jobs, unknown = conn.execute(query).one()
    # a job whose answer was lost cost what jobs cost: counted at the last known price (never as free)
    price = _last_price(conn, contract) if unknown else 0.0
    repairs_total, repairs, repairs_unknown = _repairs_spent(conn, contract, run_id=run_id, sweep=sweep,
                                                             since=since)
    return Spend(round(int(total) / MICROS + unknown * price + repairs_total, 6), int(jobs), int(unknown),
                 repairs)


def _repairs_spent(conn: Connection, contract: str, *, run_id: str | None, sweep: str | None,
                   since: dt.datetime | None) -> tuple[float, int, int]:
    """(cost, repairs asked, of which cost unknown) of the contract's provider repairs: the same budget."""
    rp = repair_proposals.c
    query = sa.select(sa.func.coalesce(sa.func.sum(rp.cost_micros), 0),
                      sa.func.count().filter(rp.repair_id.is_not(None)),
                      sa.func.count().filter(rp.repair_id.is_(None), rp.cost_micros.is_(None))
                      ).where(rp.contract == contract)
    if run_id is not None:
        query = query.where(rp.run_id == run_id)
    if sweep is not None:
        query = query.where(rp.sweep == sweep)
    if since is not None:
        query = query.where(rp.created_at >= since)
    total, asked, unknown = conn.execute(query).one()
    price = last_repair_price(conn, contract) if unknown else 0.0
    return int(total) / MICROS + unknown * price, int(asked), int(unknown)


def last_repair_price(conn: Connection, contract: str) -> float:
    micros = conn.execute(sa.select(repair_proposals.c.cost_micros).where(
        repair_proposals.c.contract == contract, repair_proposals.c.cost_micros.is_not(None),
        repair_proposals.c.repair_id.is_not(None)).order_by(repair_proposals.c.id.desc()).limit(1)).scalar()
    return (micros or 0) / MICROS


def spent(conn: Connection, contract: str, budget: Budget, *, sweep: str | None,
          now: dt.datetime) -> Spend:
    """What the budget's period spent so far (jobs and repairs)."""
    return _spent(conn, contract, sweep=sweep if budget.per == "sweep" else None,
                  since=day_start(now) if budget.per == "day" else None)


def lock_contract(conn: Connection, contract: str) -> None:
    _lock_contract(conn, contract)


def micros(cost: float | None) -> int | None:
    return _micros(cost)


def _last_price(conn: Connection, contract: str) -> float:
    micros = conn.execute(sa.select(provider_jobs.c.cost_micros).where(
        provider_jobs.c.contract == contract, provider_jobs.c.cost_micros.is_not(None))
        .order_by(provider_jobs.c.id.desc()).limit(1)).scalar()
    return (micros or 0) / MICROS


def _micros(cost: float | None) -> int | None:
    return None if cost is None else int(round(float(cost) * MICROS))


__all__: Sequence[str] = ("BudgetSpent", "Budget", "INDETERMINATE_PAUSE", "MICROS", "NothingToReconcile",
                          "ProviderJob", "ProviderJobsMixin", "Spend", "day_start", "last_repair_price",
                          "lock_contract", "micros", "spent")
