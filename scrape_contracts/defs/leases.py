"""A single-target run's lease on its target, in Dagster terms (service/leases.py does the work).

The fetch step takes the lease; the later steps of the same run carry on with it (``resume``), and a run
that only accepts a candidate of another run takes one of its own. A target scraped by another live run
ends this run with the reason (``busy: ...``); a lease lost meanwhile ends it with ``lease lost: ...``.
The holder is the run id, and a run the instance knows to have ended gives its lease up at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import dagster as dg

from scrape_contracts.adapters.store import Lease, LeaseLost, ProjectStore, TargetBusy
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts.service import leases
from scrape_contracts.service.records import Emit, Stage


def run_ended(instance: dg.DagsterInstance) -> leases.Ended:
    def ended(holder: str) -> bool:
        run = instance.get_run_by_id(holder)
        return run is not None and run.is_finished

    return ended


@dataclass
class RunLease:
    """This run's lease on its target: ``store`` commits under it; ``release`` ends it."""

    store: ProjectStore
    lease: Lease
    keeper: leases.LeaseKeeper

    def release(self) -> None:
        self.keeper.release([self.lease.key])


@contextmanager
def target_lease(context: dg.OpExecutionContext, store: ProjectStore, contract: str, partition: str,
                 fetch: FetchSettings, emit: Emit, *, take: bool = False, earlier: Lease | None = None
                 ) -> Iterator[RunLease]:
    """The run's lease on the target, renewed while the step runs.

    ``take``: take it (the fetch step, or a run that only accepts another run's candidate). Otherwise carry
    on with the lease an earlier step of this run handed on (``earlier``, checked by its token) or, without
    one, with the lease this run holds; an ``earlier`` lease of another run means this step re-executes a
    step of that run with its output, and takes a lease of its own.
    """
    duration = leases.duration_for(fetch)
    holder = context.run.run_id
    try:
        if take or (earlier is not None and earlier.holder != holder):
            lease = leases.take_one(store, contract, partition, holder=holder, duration=duration,
                                    ended=run_ended(context.instance))
        else:
            lease = leases.resume(store, contract, partition, holder=holder, duration=duration, lease=earlier)
    except TargetBusy as busy:
        emit(Stage.BUSY, {"reason": str(busy), "holder": busy.held.holder,
                          "until": busy.held.expires_at.isoformat()})
        raise dg.Failure(description=str(busy), allow_retries=False, metadata={
            "busy_with_run": busy.held.holder, "until": busy.held.expires_at.isoformat()}) from None
    except LeaseLost as lost:
        raise _lost(lost, emit) from None
    with leases.LeaseKeeper(store, [lease], duration) as keeper:
        try:
            yield RunLease(store.fenced([lease]), lease, keeper)
        except LeaseLost as lost:
            raise _lost(lost, emit) from None


def _lost(lost: LeaseLost, emit: Emit) -> dg.Failure:
    emit(Stage.LEASE_LOST, {"reason": str(lost)})
    return dg.Failure(description=str(lost), allow_retries=False)
