"""The gate: what the store does with a candidate — accept, quarantine for review, reject, or keep as is.

Accepting is always an explicit call here, never a side effect of writing an output. The single-target
path stores the candidate first and accepts it after Dagster's blocking checks passed; the batch path
records a chunk of targets and their decisions in one transaction, with the same outcome → action rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from scrape_contracts.adapters.store import Candidate, NewCandidate, ProjectStore, StoreError
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service.records import Recorded, ScrapeResult


class NotAcceptable(StoreError):
    """A candidate whose outcome does not allow acceptance."""


def quarantine_reason(result: ScrapeResult) -> str:
    return "; ".join(v.message for v in result.violations)


def _action(result: ScrapeResult, *, accept: bool) -> str:
    if result.outcome == Outcome.REVIEW_REQUIRED:
        return "quarantine"
    if result.outcome == Outcome.REJECTED:
        return "reject"
    if result.outcome == Outcome.UNCHANGED:
        return "unchanged"
    return "accept" if accept and result.accepted_outcome else "pending"


def _new_candidate(result: ScrapeResult, run_id: str, *, accept: bool) -> NewCandidate:
    validators = {k: v for k, v in result.fetched.validators.items() if v}
    return NewCandidate(
        contract=result.contract, partition=result.partition, run_id=run_id, url=result.url, record=result.record,
        outcome=result.outcome.value, details=result.details(), page_sha256=result.page_sha256,
        selector_version=result.selector_version, action=_action(result, accept=accept),
        reason=quarantine_reason(result) or None, validators=validators or None,
    )


def store_candidate(store: ProjectStore, result: ScrapeResult, run_id: str) -> Recorded:
    """Single-target path: store the candidate; quarantine or reject it now, accept later (``accept``)."""
    (row,) = store.record_candidates([_new_candidate(result, run_id, accept=False)])
    return Recorded(row.candidate_id, result.outcome, row.status, row.accepted_version,
                    quarantine_reason(result) if row.status == "quarantined" else None)


def record_results(store: ProjectStore, results: Sequence[ScrapeResult], run_id: str) -> list[Recorded]:
    """Batch path: store and decide a chunk of candidates in one transaction."""
    rows = store.record_candidates([_new_candidate(r, run_id, accept=True) for r in results])
    return [Recorded(row.candidate_id, r.outcome, row.status, row.accepted_version,
                     quarantine_reason(r) if row.status == "quarantined" else None)
            for r, row in zip(results, rows, strict=True)]


def accept(store: ProjectStore, candidate: Candidate, run_id: str) -> Recorded:
    """Make a stored candidate that passed its checks the newest accepted version (exactly once).

    An unchanged candidate needs no new version: it only refreshes the remembered validators.
    """
    outcome = Outcome(candidate.outcome)
    if outcome == Outcome.UNCHANGED:
        validators = {k: v for k, v in ((candidate.details or {}).get("validators") or {}).items() if v}
        if validators:
            store.update_state(candidate.contract, candidate.partition, **validators)
        latest = store.latest_accepted(candidate.contract, candidate.partition)
        return Recorded(candidate.id, outcome, "unchanged", latest.version if latest else None)
    if outcome not in (Outcome.VALID, Outcome.HEALED):
        # defence in depth: only a candidate that passed its checks may become accepted data, even when a run
        # materialises scrape/C alone and the candidate came from an interrupted run
        raise NotAcceptable(f"candidate {candidate.id} of {candidate.contract}/{candidate.partition} has outcome "
                            f"{outcome.value!r}; only valid or healed candidates are accepted")
    version = store.accept(candidate.id, run_id=run_id)
    return Recorded(candidate.id, outcome, "accepted", version.version)
