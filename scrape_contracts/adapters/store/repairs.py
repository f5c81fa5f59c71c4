"""Provider repairs: what a target asked its provider when healing refused, the proposal, and its review.

A repair is written ``requesting`` before the request goes out (after the contract's cost budget check, in
the same transaction, as a job's submit marker is), gets the provider's repair id and cost, then the
proposal (``proposed``) or the error (``failed``). A proposal changes nothing by itself: the candidate it
belongs to waits in quarantine, and a person's decision ends it — ``accepted`` (the record it makes passed
the contract's checks; ``selector_version`` is the version it made), ``refused`` (approved, but the record
failed the checks: ``error`` names them) or ``rejected``. Costs count in the budget with the jobs
(provider_jobs.py sums both).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from scrape_contracts.adapters.schema import repair_proposals
from scrape_contracts.adapters.statuses import RepairState
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.errors import StoreError
from scrape_contracts.adapters.store.provider_jobs import (
    MICROS, Budget, BudgetSpent, last_repair_price, lock_contract, micros, spent,
)

# the reason a candidate waiting on a provider's repair is quarantined with starts with this
REPAIR_PROPOSED = "provider repair proposed"


class RepairDecided(StoreError):
    """The proposal is not waiting for a decision any more (decided, or never proposed)."""


@dataclass(frozen=True)
class RepairProposal:
    id: int
    contract: str
    partition: str
    url: str
    run_id: str
    sweep: str
    job_id: str | None
    page_sha256: str | None
    state: RepairState
    repair_id: str | None
    fields: dict[str, str]  # field → the selector that failed
    selectors: dict[str, str]  # the proposal: field → selector
    values: dict[str, Any]  # field → the value the provider says its selector reads
    cost: float | None
    error: str | None
    selector_version: int | None
    decided_by: str | None
    decided_reason: str | None
    decided_at: dt.datetime | None
    created_at: dt.datetime

    def describe(self) -> str:
        """One line: each field's failing selector → the proposed one (and the value it reads), and the cost."""
        parts = []
        for name, selector in self.selectors.items():
            value = f" reads {self.values[name]!r}" if name in self.values else ""
            parts.append(f"{name}: {self.fields.get(name)!r} → {selector!r}{value}")
        cost = "" if self.cost is None else f", cost {self.cost:.4g}"
        return f"{'; '.join(parts)} (repair {self.repair_id}{cost})"

    def as_dict(self) -> dict[str, Any]:
        return {"proposal_id": self.id, "repair_id": self.repair_id, "state": str(self.state),
                "fields": dict(self.fields), "selectors": dict(self.selectors), "values": dict(self.values),
                "cost": self.cost, "job_id": self.job_id, "page_sha256": self.page_sha256, "error": self.error,
                "selector_version": self.selector_version, "decided_by": self.decided_by,
                "decided_reason": self.decided_reason}


def _proposal(row: Any) -> RepairProposal:
    return RepairProposal(
        row.id, row.contract, row.partition, row.url, row.run_id, row.sweep, row.job_id, row.page_sha256,
        RepairState(row.state), row.repair_id, dict(row.fields or {}), dict(row.selectors or {}),
        dict(row.proposed_values or {}), None if row.cost_micros is None else row.cost_micros / MICROS,
        row.error, row.selector_version, row.decided_by, row.decided_reason, row.decided_at, row.created_at)


class RepairsMixin(Connected):
    def begin_repair(self, contract: str, partition: str, url: str, *, run_id: str, sweep: str,
                     job_id: str | None, page_sha256: str | None, fields: dict[str, str],
                     budget: Budget | None = None) -> RepairProposal:
        """The ``requesting`` row, after the budget check (``BudgetSpent``), before anything is asked."""
        now = self.clock()
        with self._tx() as conn:
            lock_contract(conn, contract)
            if budget is not None:
                so_far = spent(conn, contract, budget, sweep=sweep, now=now)
                price = last_repair_price(conn, contract)
                if so_far.total + price > budget.amount + 1e-9:
                    raise BudgetSpent(f"cost budget spent: {budget.describe(so_far.total)}"
                                      + (f", and a repair costs about {price:.4g}" if price else "")
                                      + "; no repair was asked")
            row = conn.execute(repair_proposals.insert().values(
                contract=contract, partition=partition, url=url, run_id=run_id, sweep=sweep, job_id=job_id,
                page_sha256=page_sha256, state=RepairState.REQUESTING, fields=dict(fields), created_at=now,
                updated_at=now).returning(*repair_proposals.c)).one()
        return _proposal(row)

    def repair_requested(self, row_id: int, repair_id: str, cost: float | None) -> RepairProposal:
        return self._set_repair(row_id, repair_id=repair_id, cost_micros=micros(cost))

    def repair_proposed(self, row_id: int, selectors: dict[str, str], values: dict[str, Any],
                        cost: float | None) -> RepairProposal:
        values_ = {"state": RepairState.PROPOSED, "selectors": dict(selectors), "proposed_values": dict(values)}
        if cost is not None:
            values_["cost_micros"] = micros(cost)
        return self._set_repair(row_id, **values_)

    def repair_failed(self, row_id: int, error: str, *, cost: float | None = None,
                      charged: bool = True) -> RepairProposal:
        """``charged=False``: the request never reached the provider (nothing to pay)."""
        values: dict[str, Any] = {"state": RepairState.FAILED, "error": error}
        if cost is not None or not charged:
            values["cost_micros"] = micros(cost or 0.0)
        return self._set_repair(row_id, **values)

    def repair(self, row_id: int) -> RepairProposal | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(repair_proposals).where(repair_proposals.c.id == row_id)).first()
        return None if row is None else _proposal(row)

    def repairs(self, contract: str, partition: str | None = None) -> list[RepairProposal]:
        query = sa.select(repair_proposals).where(repair_proposals.c.contract == contract)
        if partition is not None:
            query = query.where(repair_proposals.c.partition == partition)
        with self.engine.connect() as conn:
            return [_proposal(r) for r in conn.execute(query.order_by(repair_proposals.c.id)).all()]

    def decide_repair(self, row_id: int, state: RepairState, *, by: str, reason: str, error: str | None = None,
                      selector_version: int | None = None) -> RepairProposal:
        """End a proposal with a person's decision (who and why); ``RepairDecided`` if it was ended before."""
        with self._tx() as conn:
            updated = conn.execute(repair_proposals.update().where(
                repair_proposals.c.id == row_id, repair_proposals.c.state == RepairState.PROPOSED).values(
                state=state, decided_by=by, decided_reason=reason, decided_at=self.clock(), error=error,
                selector_version=selector_version, updated_at=self.clock())).rowcount
            row = conn.execute(sa.select(repair_proposals).where(repair_proposals.c.id == row_id)).first()
        if row is None:
            raise RepairDecided(f"there is no repair proposal {row_id}")
        if not updated:
            raise RepairDecided(f"repair proposal {row_id} of {row.contract}/{row.partition} is {row.state}, "
                                "not waiting for a decision")
        return _proposal(row)

    def _set_repair(self, row_id: int, **values: Any) -> RepairProposal:
        with self._tx() as conn:
            conn.execute(repair_proposals.update().where(repair_proposals.c.id == row_id).values(
                updated_at=self.clock(), **values))
            return _proposal(conn.execute(sa.select(repair_proposals).where(
                repair_proposals.c.id == row_id)).one())
