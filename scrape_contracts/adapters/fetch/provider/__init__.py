"""The ``provider`` fetch adapter: pages fetched by a hosted scraping API's async jobs (docs/providers.md).

``client`` speaks the job protocol (submit, poll, result), ``book`` keeps the jobs in the project store (the
submit marker, the job id before the first poll), ``fetcher`` drives one target's job behind ``fetch(url)``,
sync for a single-target run and async (threads) for a batch. ``scrape_contracts.testing.provider`` is a local
stand-in for a provider, implementing the same protocol.
"""

from scrape_contracts.adapters.fetch.provider.book import JobBook
from scrape_contracts.adapters.fetch.provider.client import (
    JobResult, JobStatus, NotSent, ProviderClient, ProviderError, RepairStatus, Submitted, Unanswered,
)
from scrape_contracts.adapters.fetch.provider.fetcher import (
    AsyncProviderFetcher, ProviderFetcher, indeterminate_reason,
)

__all__ = ["AsyncProviderFetcher", "JobBook", "JobResult", "JobStatus", "NotSent", "ProviderClient",
           "ProviderError", "ProviderFetcher", "RepairStatus", "Submitted", "Unanswered", "indeterminate_reason"]
