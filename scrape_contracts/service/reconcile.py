"""Reconciling an indeterminate provider submission: adopt the job the provider did run, or resubmit.

A target is indeterminate when a submit to the provider may have created a job whose id was never recorded
(adapters/store/provider_jobs.py). A person looks at the provider (its dashboard, or its job list by the
label ``<contract>/<target>``) and either adopts that job — the target's next scrape polls it and puts its
page through the contract's checks like any other — or, when the provider has none, resubmits. Adopting
checks with the provider first that the job exists (and is for the target's URL, when the provider says), so
a mistyped id cannot send the next run polling a job that is not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scrape_contracts import settings
from scrape_contracts.adapters.store import ProjectStore, ProviderJob, StoreError
from scrape_contracts.contract.loader import LoadedContract


class ReconcileRefused(StoreError):
    """The reconciliation cannot be made as asked; the message says what to do instead."""


@dataclass(frozen=True)
class Reconciled:
    contract: str
    partition: str
    action: str  # adopted | resubmit
    job: ProviderJob  # the submission after the decision
    note: str

    def line(self) -> str:
        if self.action == "adopted":
            return (f"{self.contract}/{self.partition}: adopted provider job {self.job.job_id}; the target's "
                    "next scrape polls it and puts its page through the contract's checks")
        return (f"{self.contract}/{self.partition}: submission abandoned; the target's next scrape submits a "
                "new job")


def reconcile(store: ProjectStore, loaded: LoadedContract, partition: str, *, job_id: str | None = None,
              resubmit: bool = False, by: str, reason: str = "",
              environ: Mapping[str, str] | None = None) -> Reconciled:
    contract = loaded.contract
    if contract.fetch.adapter != "provider":
        raise ReconcileRefused(f"{contract.name!r} does not fetch through a provider (fetch.adapter is "
                               f"{contract.fetch.adapter!r}): nothing to reconcile")
    job_id = (job_id or "").strip() or None
    if (job_id is None) == (not resubmit):
        raise ReconcileRefused("say what the provider did: --job-id ID (adopt the job it ran) or --resubmit "
                               "(it has none), not both")
    if not by.strip():
        raise ReconcileRefused("reconciling a target needs who (--by)")
    open_job = store.open_job(contract.name, partition)
    if open_job is None or open_job.job_id is not None:
        # said before asking the provider anything: the usual mistake is the wrong target
        what = (f"its provider job {open_job.job_id} is known ({open_job.state})" if open_job is not None
                else "it has no provider submission in flight")
        raise ReconcileRefused(f"nothing to reconcile for {contract.name}/{partition}: {what}; reconcile is "
                               "for a target paused as indeterminate")
    why = f": {reason.strip()}" if reason.strip() else ""
    if job_id is not None:
        _check_job(job_id, open_job, environ)
        note = f"adopted job {job_id} by {by.strip()}{why}"
        job = store.adopt_job(contract.name, partition, job_id, note=note)
        return Reconciled(contract.name, partition, "adopted", job, note)
    note = f"resubmitted by {by.strip()}{why}"
    job = store.abandon_submission(contract.name, partition, note=note)
    return Reconciled(contract.name, partition, "resubmit", job, note)


def _check_job(job_id: str, submission: ProviderJob, environ: Mapping[str, str] | None) -> None:
    from scrape_contracts.adapters.fetch.provider import NotSent, ProviderClient, ProviderError, Unanswered

    endpoint = settings.provider_endpoint(environ)
    if isinstance(endpoint, str):
        raise ReconcileRefused(f"cannot ask the provider about job {job_id}: {endpoint}")
    client = ProviderClient(*endpoint)
    try:
        status = client.status(job_id)
    except (NotSent, Unanswered) as exc:
        raise ReconcileRefused(f"cannot ask the provider about job {job_id} ({exc}); nothing was changed: "
                               "try again") from None
    except ProviderError as exc:
        if exc.status == 404:
            label = f"{submission.contract}/{submission.partition}"
            raise ReconcileRefused(f"the provider knows no job {job_id!r}: check the id in its dashboard "
                                   f"(the job is labelled {label}); nothing was changed") from None
        raise ReconcileRefused(f"the provider did not confirm job {job_id}: {exc}; nothing was "
                               "changed") from None
    finally:
        client.close()
    if status.url is not None and status.url != submission.url:
        raise ReconcileRefused(f"provider job {job_id} fetches {status.url}, not this target's "
                               f"{submission.url}: adopt the job made for this target; nothing was changed")
