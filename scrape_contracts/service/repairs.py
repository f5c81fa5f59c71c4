"""The provider's own repair: asked when healing refuses, held for a person, gated again when approved.

A contract with ``fetch.provider.repair: true`` whose healer refused a field asks its provider once for a
repair of the fields refused, on the page the provider's job fetched (the budget check first: the repair's
cost counts with the jobs). A proposal (field → selector) changes nothing: the candidate is quarantined with
the reason ``provider repair proposed: ...`` and the target waits for review like any quarantine.

A reviewer's decision is service/repair_review.py: an accepted proposal is still gated by the contract's
checks before any data is accepted or any selector changes.

Both run paths (single and batch) reach ``ask`` through ``scrape.heal_and_decide``; the review paths
(``review_job``, the CLI, the API and MCP) reach ``repair_review.decide`` through the review job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from scrape_contracts import settings
from scrape_contracts.adapters.store import REPAIR_PROPOSED, Budget, BudgetSpent, ProjectStore, RepairProposal
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.service.records import Emit, Stage, Validated


def budget_of(contract: Contract) -> Budget | None:
    """The contract's cost budget (jobs and repairs), or None."""
    budget = contract.fetch.provider_settings.budget if contract.fetch.adapter == "provider" else None
    return None if budget is None else Budget(budget.amount, budget.per, budget.currency)


def wanted(loaded: LoadedContract) -> bool:
    contract = loaded.contract
    return (contract.fetch.adapter == "provider" and contract.fetch.provider_settings.repair
            and not contract.is_list)


def quarantine_reason(proposal: dict[str, Any]) -> str:
    """The reason a candidate waiting on a proposal is quarantined with (the target's pause says it too)."""
    fields = ", ".join(f"{name} → {selector!r}" for name, selector in (proposal.get("selectors") or {}).items())
    return (f"{REPAIR_PROPOSED}: {fields} (repair {proposal.get('repair_id')}, proposal "
            f"{proposal.get('proposal_id')}); accept applies it to the stored page and checks the record, "
            "reject discards it")


# ---- asking ------------------------------------------------------------------------------------
def ask(loaded: LoadedContract, validated: Validated, refused: list[str], run_id: str, store: ProjectStore,
        emit: Emit, *, environ: Mapping[str, str] | None = None, sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> RepairProposal | None:
    """Ask the provider to repair ``refused`` on the fetched page; the proposal, or None (said in ``emit``)."""
    from scrape_contracts.adapters.fetch.provider import NotSent, ProviderClient, ProviderError, Unanswered

    contract, fetched = loaded.contract, validated.fetched
    endpoint = settings.provider_endpoint(environ)
    if isinstance(endpoint, str) or not fetched.page_sha256:
        why = endpoint if isinstance(endpoint, str) else "no stored page to repair"
        emit(Stage.REPAIR_FAILED, {"fields": refused, "reason": f"no provider repair asked: {why}"})
        return None
    jobs = store.provider_jobs(contract.name, fetched.partition)
    job = jobs[-1] if jobs else None  # the job that fetched this page
    previous = fetched.previous
    fields = {name: validated.extracted.selectors[name] for name in refused}
    try:
        row = store.begin_repair(contract.name, fetched.partition, fetched.url, run_id=run_id,
                                 sweep=job.sweep if job else f"run:{run_id}", job_id=job.job_id if job else None,
                                 page_sha256=fetched.page_sha256, fields=fields, budget=budget_of(contract))
    except BudgetSpent as exc:
        emit(Stage.REPAIR_FAILED, {"fields": refused, "reason": f"no provider repair asked: {exc}"})
        return None
    asked = {name: {"selector": selector, "type": contract.fields[name].type,
                    "last_value": previous.record.get(name) if previous else None}
             for name, selector in fields.items()}
    fetch = contract.fetch
    client = ProviderClient(*endpoint, timeout_s=fetch.timeout_s)
    try:
        try:
            submitted = client.request_repair(url=fetched.final_url, label=f"{contract.name}/{fetched.partition}",
                                              job_id=row.job_id, fields=asked)
        except NotSent as exc:
            return _failed(store, row, emit, str(exc), charged=False)
        except Unanswered as exc:  # it may have been made and charged: counted at the last repair price
            return _failed(store, row, emit, str(exc))
        except ProviderError as exc:
            hint = (" (the provider offers no repairs: set fetch.provider.repair to false)"
                    if exc.status == 404 else "")
            return _failed(store, row, emit, f"{exc}{hint}", charged=False)
        row = store.repair_requested(row.id, submitted.job_id, submitted.cost)
        emit(Stage.REPAIR_REQUESTED, {"fields": refused, "repair_id": submitted.job_id, "cost": submitted.cost,
                                      "job_id": row.job_id})
        status, started, wait = None, clock(), fetch.provider_settings.poll_interval_s
        while clock() - started < fetch.deadline_s:
            try:
                status = client.repair_status(submitted.job_id)
            except (Unanswered, NotSent):
                status = None
            else:
                if status.finished:
                    break
            sleep(min(max(wait, (status.retry_after_s or 0) if status else 0),
                      fetch.provider_settings.max_poll_interval_s))
            wait *= 2
        else:
            return _failed(store, row, emit, f"repair {submitted.job_id} gave no proposal within "
                                             f"fetch.deadline_s ({fetch.deadline_s:g}s)")
    except ProviderError as exc:
        return _failed(store, row, emit, str(exc))
    finally:
        client.close()
    if status.state == "failed":
        return _failed(store, row, emit, f"repair {status.repair_id} failed at the provider: "
                                         f"{status.error or 'no reason given'}", cost=status.cost)
    proposed = {name: selector for name, selector in status.selectors.items() if name in fields}
    if set(proposed) != set(fields):
        missing = ", ".join(sorted(set(fields) - set(proposed)))
        return _failed(store, row, emit, f"repair {status.repair_id} proposed no selector for {missing}",
                       cost=status.cost)
    proposal = store.repair_proposed(row.id, proposed, status.values, status.cost)
    emit(Stage.REPAIR_PROPOSED, {**proposal.as_dict(), "reason": f"{REPAIR_PROPOSED}: {proposal.describe()}"})
    return proposal


def _failed(store: ProjectStore, row: RepairProposal, emit: Emit, error: str, *, cost: float | None = None,
            charged: bool = True) -> None:
    store.repair_failed(row.id, error, cost=cost, charged=charged)
    emit(Stage.REPAIR_FAILED, {"fields": sorted(row.fields), "reason": f"provider repair: {error}"})
    return None
