"""The provider adapter in Dagster terms: a run's job book, the sweep a run belongs to, spend as metadata.

A sweep is one launch of a contract's targets, whatever door it came through: the runs of one idempotency key
(``scrape-contracts run``, the API), of one backfill, or of one schedule tick; a run launched on its own (the
UI's Materialize) is a sweep of its own. A budget ``per: sweep`` sums the jobs of the runs of one sweep.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import dagster as dg

from scrape_contracts import settings
from scrape_contracts.adapters.fetch.provider import JobBook
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.names import IDEMPOTENCY_TAG, accepted_key
from scrape_contracts.service.repairs import budget_of

_BATCH_OF_KEY = re.compile(r":batch-\d+-of-\d+")


def sweep_of(tags: Mapping[str, str], run_id: str) -> str:
    if tags.get(IDEMPOTENCY_TAG):
        return f"launch:{tags[IDEMPOTENCY_TAG]}"
    if tags.get("dagster/backfill"):
        return f"backfill:{tags['dagster/backfill']}"
    if tags.get("dagster/schedule_name") and tags.get("dagster/run_key"):
        # the run key is <contract>:batch-<i>-of-<n>:<tick>: the tick's batches are one sweep
        return f"schedule:{tags['dagster/schedule_name']}:{_BATCH_OF_KEY.sub('', tags['dagster/run_key'])}"
    return f"run:{run_id}"


def job_book(loaded: LoadedContract, store: ProjectStore, run: dg.DagsterRun, urls: Mapping[str, str]
             ) -> JobBook | None:
    """The book a provider contract's run keeps its jobs in (None for the other adapters); ``urls``: partition
    → URL of the targets it fetches."""
    contract = loaded.contract
    if contract.fetch.adapter != "provider":
        return None
    return JobBook(store.url, contract.name, run.run_id, {url: key for key, url in urls.items()},
                   sweep=sweep_of(run.tags, run.run_id), budget=budget_of(contract),
                   endpoint=settings.provider_endpoint())


def budget_pause(loaded: LoadedContract, store: ProjectStore, run: dg.DagsterRun) -> str | None:
    """Why the contract is paused for its cost budget now (None: not paused, or no budget)."""
    budget = budget_of(loaded.contract)
    if budget is None:
        return None
    return store.budget_left(loaded.contract.name, budget, sweep=sweep_of(run.tags, run.run_id))[1]


def budget_observation(contract: str, reason: str) -> dg.AssetObservation:
    """On the accepted data (the whole asset, not one target): the contract is paused for its budget."""
    return dg.AssetObservation(asset_key=accepted_key(contract), metadata={"paused": reason},
                               description=f"paused: {reason}"[:300])


def spend_metadata(loaded: LoadedContract, store: ProjectStore, run_id: str) -> dict[str, Any]:
    """What this run's provider jobs cost (empty for the other adapters)."""
    if loaded.contract.fetch.adapter != "provider":
        return {}
    spend = store.provider_spend(loaded.contract.name, run_id=run_id)
    budget = budget_of(loaded.contract)
    currency = budget.currency if budget else ""
    return {"provider_jobs": spend.jobs, "provider_spend": round(spend.total, 6),
            **({"provider_currency": currency} if currency else {}),
            **({"provider_unknown_cost_jobs": spend.unknown} if spend.unknown else {}),
            **({"provider_repairs": spend.repairs} if spend.repairs else {})}


def job_metadata(attempts: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The provider job behind a fetched page, for the candidate's metadata."""
    for attempt in attempts:
        if attempt.get("provider_job"):
            return {"provider_job": str(attempt["provider_job"]), "provider_cost": attempt.get("cost") or 0.0,
                    "provider_polls": int(attempt.get("polls") or 0)}
    return {}
