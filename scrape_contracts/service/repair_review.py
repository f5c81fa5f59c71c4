"""Deciding a provider's repair proposal: a reviewer's accept is gated by the contract's checks again.

Accept applies the proposed selectors to the stored page the repair was asked for and puts the record through
the contract's checks (schema, rules, change limit), as a scrape does: only a record that passes makes a
selector version (source ``provider_repair``, who approved) and becomes accepted data. One that fails is
refused with the failing checks named (``RepairRefused``): the last accepted data and the selectors stay, and
the target stays paused. Reject discards the proposal: nothing changes and the target stays paused (its
selectors are still broken; a person fixes the contract and resumes it). Asking is in service/repairs.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scrape_contracts import settings
from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, RepairState, SelectorSource
from scrape_contracts.adapters.store import (
    Candidate, ProjectStore, RepairProposal, SelectorConflict, StaleCandidate, StoreError,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.extract import extract_record
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.engine.select import parse_html
from scrape_contracts.service import gate, scrape
from scrape_contracts.service.records import Emit, Extracted, Fetched, HealReport, no_emit


class RepairRefused(StoreError):
    """An approved proposal whose record failed the contract's checks: nothing was accepted or changed."""


@dataclass(frozen=True)
class RepairDecision:
    proposal: RepairProposal
    accepted_version: int | None  # the accepted version it made (accept that passed the checks)
    selector_version: int | None
    pause_reason: str | None  # the target's pause after the decision


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
    stored = gate.store_candidate(store, result, run_id)
    try:
        # the reviewer's acceptance, with who and why, against the version the record was checked with
        accepted = store.accept(stored.candidate_id, run_id=run_id, source=AcceptSource.REVIEW, reviewer=reviewer,
                                reason=reason, compared_with=previous.version if previous else None)
    except StaleCandidate:
        store.set_candidate_status(stored.candidate_id, CandidateStatus.SUPERSEDED)
        return _refuse(store, candidate, proposal, reviewer, reason,
                       "another run accepted newer data while it was checked: review the target again",
                       selector_version=version)
    done = store.decide_repair(proposal.id, RepairState.ACCEPTED, by=reviewer, reason=reason,
                               selector_version=version)
    state = store.state(name, partition)
    return RepairDecision(done, accepted.version, version, state.pause_reason if state.paused else None)


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
    store.decide_repair(proposal.id, RepairState.REFUSED, by=reviewer, reason=reason, error=why,
                        selector_version=selector_version)
    if store.candidate(candidate.id).status == CandidateStatus.QUARANTINED:
        store.set_candidate_status(candidate.id, CandidateStatus.REJECTED)
    pause = _still_broken(candidate.contract, candidate.partition,
                          f"provider repair {proposal.repair_id} accepted by {reviewer} but refused: {why}")
    store.pause(candidate.contract, candidate.partition, pause, cause="repair_refused")
    raise RepairRefused(f"{candidate.contract}/{candidate.partition}: {pause}")
