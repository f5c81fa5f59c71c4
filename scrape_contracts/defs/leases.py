"""A single-target run's lease on its target, in Dagster terms (service/leases.py does the work).

The candidate step takes the lease (service/single.py); the step that accepts its candidate carries on with
it (``resume``), and a run that only accepts a candidate of another run takes one of its own. A target scraped by another live run
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


def run_of(holder: str) -> str:
    """The run id of a lease holder: a run id, or ``<run id>/<chunk>/<attempt>`` for a chunk step of a
    batched run (``chunk_holder``)."""
    return holder.split("/", 1)[0]


def run_ended(instance: dg.DagsterInstance) -> leases.Ended:
    def ended(holder: str) -> bool:
        run = instance.get_run_by_id(run_of(holder))
        return run is not None and run.is_finished

    return ended


def chunk_holder(run_id: str, chunk: str, attempt: str) -> str:
    """The holder of one attempt at one chunk step. Each attempt is a holder of its own, so taking the
    chunk's leases again gives new fencing tokens: an earlier attempt that is in fact alive (a worker frozen
    until the broker gave its chunk to another) can no longer commit."""
    return f"{run_id}/{chunk}/{attempt}"


def chunk_ended(instance: dg.DagsterInstance, holder: str) -> leases.Ended:
    """As ``run_ended``, and: an earlier attempt at the same chunk has ended. The executor starts a chunk again
    only when it gave the earlier attempt up (its worker was lost, or its step is retried); if that attempt
    is still alive somewhere, the new tokens refuse its commits."""
    of_run = run_ended(instance)
    same_chunk = holder.rsplit("/", 1)[0] + "/"

    def ended(other: str) -> bool:
        return (other.startswith(same_chunk) and other != holder) or of_run(other)

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
def lease_failures(emit: Emit) -> Iterator[None]:
    """A target scraped by another live run, or a lease lost meanwhile, ends the step with the reason."""
    try:
        yield
    except TargetBusy as busy:
        emit(Stage.BUSY, {"reason": str(busy), "holder": busy.held.holder,
                          "until": busy.held.expires_at.isoformat()})
        raise dg.Failure(description=str(busy), allow_retries=False, metadata={
            "busy_with_run": busy.held.holder, "until": busy.held.expires_at.isoformat()}) from None
    except LeaseLost as lost:
        emit(Stage.LEASE_LOST, {"reason": str(lost)})
        raise dg.Failure(description=str(lost), allow_retries=False) from None


@contextmanager
def target_lease(context: dg.OpExecutionContext, store: ProjectStore, contract: str, partition: str,
                 fetch: FetchSettings, emit: Emit, *, take: bool) -> Iterator[RunLease]:
    """The run's lease on the target, renewed while the step runs: taken (``take``: a run that only accepts
    another run's candidate), or the one this run's candidate step left it (checked to be still this run's)."""
    duration = leases.duration_for(fetch)
    holder = context.run.run_id
    with lease_failures(emit):
        if take:
            lease = leases.take_one(store, contract, partition, holder=holder, duration=duration,
                                    ended=run_ended(context.instance))
        else:
            lease = leases.resume(store, contract, partition, holder=holder, duration=duration)
        with leases.LeaseKeeper(store, [lease], duration) as keeper:
            yield RunLease(store.fenced([lease]), lease, keeper)
