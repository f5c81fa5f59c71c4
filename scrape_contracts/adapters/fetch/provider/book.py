"""``JobBook``: where the provider adapter keeps its jobs — the project store, for one contract and one run.

A book is small and picklable (the store's URL, not the store), so a batch hands it to its worker processes,
which open the store themselves. ``targets`` maps each URL the run fetches to its target's partition key
(the fetch interface takes a URL; a provider contract has one target per URL, contract/targets.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from scrape_contracts.adapters.store import Budget, ProjectStore, ProviderJob


@dataclass(frozen=True)
class JobBook:
    db_url: str
    contract: str
    run_id: str
    targets: Mapping[str, str] = field(repr=False)  # URL → partition key
    sweep: str = ""
    budget: Budget | None = None
    # the provider's (base URL, token), or why there is none, as the run's process read them: a batch's worker
    # processes fork from a server started earlier, whose environment may be older than the run's
    endpoint: tuple[str, str] | str | None = field(default=None, repr=False)

    @property
    def store(self) -> ProjectStore:
        return ProjectStore(self.db_url)  # one engine per URL per process: cheap after the first

    def partition_for(self, url: str) -> str:
        try:
            return self.targets[url]
        except KeyError:
            raise LookupError(f"{url} is not a target of this run of {self.contract!r}") from None

    def label(self, partition: str) -> str:
        """What the provider keeps with the job: a person finds it by this in the provider's dashboard."""
        return f"{self.contract}/{partition}"

    def open_job(self, partition: str) -> ProviderJob | None:
        return self.store.open_job(self.contract, partition)

    def begin_submit(self, partition: str, url: str) -> ProviderJob:
        return self.store.begin_submit(self.contract, partition, url, run_id=self.run_id,
                                       sweep=self.sweep or f"run:{self.run_id}", budget=self.budget)

    def submitted(self, job: ProviderJob, job_id: str, cost: float | None) -> ProviderJob:
        return self.store.job_submitted(job.id, job_id, cost)

    def not_sent(self, job: ProviderJob, error: str) -> None:
        self.store.submit_not_sent(job.id, error)

    def polled(self, job: ProviderJob, polls: int) -> None:
        self.store.job_polled(job.id, polls)

    def finished(self, job: ProviderJob, *, done: bool, cost: float | None, error: str | None = None,
                 polls: int | None = None) -> ProviderJob:
        return self.store.job_finished(job.id, done=done, cost=cost, error=error, polls=polls)

    def indeterminate(self, job: ProviderJob, reason: str) -> ProviderJob:
        return self.store.mark_indeterminate(job.id, reason)
