"""The provider's own repair: asked when healing refuses, held for a person, gated again when approved.

A contract with ``fetch.provider.repair: true`` whose healer refused a field asks its provider once for a
repair of the fields refused, on the page the provider's job fetched (the budget check first: the repair's
cost counts with the jobs). A proposal (field → selector) changes nothing: the candidate is quarantined with
the reason ``provider repair proposed: ...`` and the target waits for review like any quarantine.

A reviewer's **accept** applies the proposed selectors to the stored page the repair was asked for and puts
the record through the contract's checks again (schema, rules, change limit): only a record that passes
them makes a selector version (source ``provider_repair``, who approved) and becomes accepted data. One that
fails is refused with the failing checks named: the last accepted data and the selectors stay as they were,
and the target stays paused. **Reject** discards the proposal: nothing changes and the target stays paused
(the selectors are still broken; a person fixes the contract and resumes it).

Both run paths reach ``ask`` through ``scrape.heal_and_decide``; the review paths (``review_job``, the CLI,
the API and MCP) reach ``decide`` through the review job.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrape_contracts import settings
from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.schema import RepairState, SelectorSource
from scrape_contracts.adapters.store import (
    REPAIR_PROPOSED, Budget, BudgetSpent, Candidate, ProjectStore, RepairProposal, SelectorConflict, StoreError,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service.records import Emit, Extracted, Fetched, HealReport, Stage, Validated, no_emit


class RepairRefused(StoreError):
    """An approved proposal whose record failed the contract's checks: nothing was accepted or changed."""


@dataclass(frozen=True)
class RepairDecision:
    proposal: RepairProposal
    accepted_version: int | None  # the accepted version it made (accept that passed the checks)
    selector_version: int | None
    pause_reason: str | None  # the target's pause after the decision


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


# ---- deciding ----------------------------------------------------------------------------------
def proposal_of(store: ProjectStore, candidate: Candidate) -> RepairProposal | None:
    """The proposal a quarantined candidate waits on, or None (an ordinary quarantine)."""
    repair = ((candidate.details or {}).get("heal") or {}).get("repair") or {}
    proposal_id = repair.get("proposal_id")
    return store.repair(int(proposal_id)) if proposal_id is not None else None


def decide(store: ProjectStore, loaded: LoadedContract, artifacts: PageStore, candidate: Candidate,
           proposal: RepairProposal, decision: str, *, reviewer: str, reason: str, run_id: str,
           emit: Emit = no_emit) -> RepairDecision:
    """A person's decision on a proposal; ``RepairRefused`` when an accepted one fails the checks."""
    if proposal.state != RepairState.PROPOSED:
        raise StoreError(f"repair proposal {proposal.id} of {candidate.contract}/{candidate.partition} is "
                         f"{proposal.state}, not waiting for a decision")
    if decision == "reject":
        return _reject(store, candidate, proposal, reviewer=reviewer, reason=reason, run_id=run_id)
    return _accept(store, loaded, artifacts, candidate, proposal, reviewer=reviewer, reason=reason,
                   run_id=run_id, emit=emit)


def _still_broken(contract: str, partition: str, what: str) -> str:
    return (f"{what}; the last accepted data stays and the selectors did not change: fix the field's selector "
            f"in the contract (or accept a new proposal), then `scrape-contracts resume {contract} {partition}`")


def _reject(store: ProjectStore, candidate: Candidate, proposal: RepairProposal, *, reviewer: str, reason: str,
            run_id: str) -> RepairDecision:
    done = store.decide_repair(proposal.id, RepairState.REJECTED, by=reviewer, reason=reason)
    store.decide(candidate.contract, candidate.partition, "reject", reviewer=reviewer, reason=reason,
                 run_id=run_id, candidate_id=candidate.id)
    pause = _still_broken(candidate.contract, candidate.partition,
                          f"provider repair {proposal.repair_id} rejected by {reviewer}: {reason}")
    store.pause(candidate.contract, candidate.partition, pause, cause="repair_rejected")
    return RepairDecision(done, None, None, pause)


def _accept(store: ProjectStore, loaded: LoadedContract, artifacts: PageStore, candidate: Candidate,
            proposal: RepairProposal, *, reviewer: str, reason: str, run_id: str, emit: Emit) -> RepairDecision:
    from scrape_contracts.engine.extract import extract_record
    from scrape_contracts.engine.select import parse_html
    from scrape_contracts.service import gate, scrape

    contract = loaded.contract
    name, partition = contract.name, candidate.partition
    sha = proposal.page_sha256 or candidate.page_sha256
    html = artifacts.get(sha) if sha else None
    if html is None:
        return _refuse(store, candidate, proposal, reviewer, reason,
                       f"the page repair {proposal.repair_id} was asked for ({sha}) is no longer in the page "
                       "storage, so its record cannot be checked")
    current = store.current_selectors(name, contract.selectors())
    selectors = {**current.selectors, **proposal.selectors}
    previous = scrape.previous_of(store, name, partition)
    attempts = tuple(dict(a) for a in (candidate.details or {}).get("attempts") or ())
    fetched = Fetched(name, partition, candidate.url, candidate.url, sha, False, attempts, None, None, previous)
    extraction = extract_record(parse_html(html), contract.fields, selectors, limits=settings.engine_limits(),
                                page_url=candidate.url)
    extracted = Extracted(fetched, extraction.record, extraction.problems, current.version, selectors)
    validated = scrape.validate(loaded, extracted, emit)
    evidence = {field: {"value": extraction.record.get(field), "selector": selector,
                        "old_selector": proposal.fields.get(field), "confidence": None,
                        "evidence": {"strategy": "provider_repair", "repair_id": proposal.repair_id,
                                     "approved_by": reviewer}}
                for field, selector in proposal.selectors.items()}
    report = HealReport(attempted=True, healed=True, fields=tuple(proposal.selectors), results=evidence,
                        repair={**proposal.as_dict(), "state": str(RepairState.ACCEPTED)})
    result = scrape.decide(loaded, validated, report, emit)
    if result.outcome not in (Outcome.VALID, Outcome.HEALED):
        failing = "; ".join(f"{v.check}: {v.message}" for v in result.violations) or str(result.outcome)
        return _refuse(store, candidate, proposal, reviewer, reason,
                       f"the record repair {proposal.repair_id} gives fails the contract's checks ({failing})")
    version = _save_selectors(store, loaded, proposal, current.version, reviewer=reviewer, reason=reason,
                              run_id=run_id, partition=partition)
    result = dataclasses.replace(result, selector_version=version,
                                 heal=dataclasses.replace(report, selector_version=version))
    [(_, recorded)] = gate.record_results(store, [result], run_id, loaded)
    if recorded.status != "accepted":  # another run accepted newer data meanwhile, and against it this fails
        return _refuse(store, candidate, proposal, reviewer, reason,
                       f"against newer accepted data the repaired record is {recorded.status}: "
                       f"{recorded.quarantine_reason}", selector_version=version)
    done = store.decide_repair(proposal.id, RepairState.ACCEPTED, by=reviewer, reason=reason,
                               selector_version=version)
    state = store.state(name, partition)
    return RepairDecision(done, recorded.accepted_version, version, state.pause_reason if state.paused else None)


def _save_selectors(store: ProjectStore, loaded: LoadedContract, proposal: RepairProposal, parent: int, *,
                    reviewer: str, reason: str, run_id: str, partition: str) -> int:
    contract = loaded.contract
    changes = {field: {"old": proposal.fields.get(field), "new": selector, "confidence": None,
                       "evidence": {"strategy": "provider_repair", "repair_id": proposal.repair_id,
                                    "proposal_id": proposal.id, "approved_by": reviewer, "reason": reason}}
               for field, selector in proposal.selectors.items()}
    for _ in range(10):
        latest = store.current_selectors(contract.name, contract.selectors())
        if latest.version != parent:
            parent = latest.version  # another run healed meanwhile: keep its selectors, ours on top
        try:
            return store.add_selector_version(
                contract.name, parent_version=parent, selectors={**latest.selectors, **proposal.selectors},
                contract_selectors=contract.selectors(), source=SelectorSource.PROVIDER_REPAIR, changes=changes,
                run_id=run_id, partition=partition).version
        except SelectorConflict:
            continue
    raise SelectorConflict(f"could not save the repaired selectors of {contract.name!r}: too much contention")


def _refuse(store: ProjectStore, candidate: Candidate, proposal: RepairProposal, reviewer: str, reason: str,
            why: str, *, selector_version: int | None = None) -> RepairDecision:
    from scrape_contracts.adapters.schema import CandidateStatus

    store.decide_repair(proposal.id, RepairState.REFUSED, by=reviewer, reason=reason, error=why,
                        selector_version=selector_version)
    if store.candidate(candidate.id).status == CandidateStatus.QUARANTINED:
        store.set_candidate_status(candidate.id, CandidateStatus.REJECTED)
    pause = _still_broken(candidate.contract, candidate.partition,
                          f"provider repair {proposal.repair_id} accepted by {reviewer} but refused: {why}")
    store.pause(candidate.contract, candidate.partition, pause, cause="repair_refused")
    raise RepairRefused(f"{candidate.contract}/{candidate.partition}: {pause}")
