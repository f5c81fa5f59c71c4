"""The gate: what the store does with a candidate — accept, quarantine for review, reject, or keep as is.

Accepting is always an explicit call here, never a side effect of writing an output. The single-target
path stores the candidate first and accepts it after Dagster's blocking checks passed; the batch path
records a chunk of targets and their decisions in one transaction, with the same outcome → action rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from scrape_contracts.adapters.store import (
    Candidate, CandidateAction, CandidateStatus, LeaseLost, LostLease, NewCandidate, ProjectStore, StaleCandidate,
    StoreError,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service import fingerprints, repairs, scrape
from scrape_contracts.service.records import Recorded, ScrapeResult


class NotAcceptable(StoreError):
    """A candidate whose outcome does not allow acceptance."""


def quarantine_reasons(result: ScrapeResult) -> list[str]:
    reasons = [v.message for v in result.violations]
    if result.heal.repair_pending:  # said first: it is what the reviewer decides on
        reasons.insert(0, repairs.quarantine_reason(result.heal.repair))
    return reasons


def quarantine_reason(result: ScrapeResult) -> str:
    return "; ".join(quarantine_reasons(result))


def _action(result: ScrapeResult, *, accept: bool) -> CandidateAction:
    if result.outcome == Outcome.REVIEW_REQUIRED:
        return CandidateAction.QUARANTINE
    if result.outcome == Outcome.REJECTED:
        return CandidateAction.REJECT
    if result.outcome == Outcome.UNCHANGED:
        return CandidateAction.UNCHANGED
    return CandidateAction.ACCEPT if accept and result.accepted_outcome else CandidateAction.PENDING


def _new_candidate(result: ScrapeResult, run_id: str, *, accept: bool) -> NewCandidate:
    validators = {k: v for k, v in result.fetched.validators.items() if v}
    previous = result.fetched.previous
    return NewCandidate(
        compared_with=previous.version if previous else None,
        contract=result.contract, partition=result.partition, run_id=run_id, url=result.url, record=result.record,
        outcome=result.outcome, details=result.details(), page_sha256=result.page_sha256,
        selector_version=result.selector_version, action=_action(result, accept=accept),
        reason=quarantine_reason(result) or None, validators=validators or None,
    )


def store_candidate(store: ProjectStore, result: ScrapeResult, run_id: str) -> Recorded:
    """Single-target path: store the candidate; quarantine or reject it now, accept later (``accept``)."""
    (row,) = store.record_candidates([_new_candidate(result, run_id, accept=False)])
    fingerprints.save(store, [(result, Recorded(row.candidate_id, result.outcome, row.status))])
    return Recorded(row.candidate_id, result.outcome, row.status, row.accepted_version,
                    quarantine_reason(result) if row.status == CandidateStatus.QUARANTINED else None)


def record_results(store: ProjectStore, results: Sequence[ScrapeResult], run_id: str, loaded: LoadedContract
                   ) -> list[tuple[ScrapeResult, Recorded | LostLease]]:
    """Batch path: store and decide a chunk of candidates in one transaction; the pairs in ``results``' order.

    A candidate whose target got a newer accepted version meanwhile (another run) is diffed against that
    version and decided again, so it may come back quarantined or unchanged instead of accepted. With a
    fenced ``store``, a target whose lease was lost gets its ``LostLease`` and nothing recorded; the others
    are recorded without it (the refused transaction wrote nothing).
    """
    final: dict[int, tuple[ScrapeResult, Recorded | LostLease]] = {}
    pending = list(enumerate(results))
    redecisions = 0
    while pending:
        try:
            rows = store.record_candidates([_new_candidate(r, run_id, accept=True) for _, r in pending])
        except LeaseLost as exc:
            lost = {item.key: item for item in exc.lost}
            for index, result in pending:
                if (result.contract, result.partition) in lost:
                    final[index] = (result, lost[(result.contract, result.partition)])
            pending = [(i, r) for i, r in pending if i not in final]
            continue
        retry = []
        for (index, result), row in zip(pending, rows, strict=True):
            if row.stale:
                retry.append((index, scrape.redecide(loaded, result, scrape.previous_of(
                    store, result.contract, result.partition))))
            else:
                reason = quarantine_reason(result) if row.status == CandidateStatus.QUARANTINED else None
                final[index] = (result, Recorded(row.candidate_id, result.outcome, row.status, row.accepted_version,
                                                 reason))
        pending = retry
        redecisions += bool(retry)
        if redecisions >= _MAX_REDECISIONS and pending:
            raise StoreError(f"could not record {len(pending)} candidate(s): other runs kept accepting newer "
                             "versions")
    done = [final[i] for i in range(len(results))]
    fingerprints.save(store, [(r, rec) for r, rec in done if isinstance(rec, Recorded)])
    return done


_MAX_REDECISIONS = 5


def accept(store: ProjectStore, candidate: Candidate, run_id: str, loaded: LoadedContract) -> Recorded:
    """Make a stored candidate that passed its checks the newest accepted version (exactly once).

    An unchanged candidate needs no new version: it only refreshes the remembered validators. When another
    run accepted a newer version since this candidate was diffed, it is diffed against that one and decided
    again: it is accepted, or found unchanged, or quarantined for review (``Recorded.status`` says which).
    """
    outcome = Outcome(candidate.outcome)
    if outcome == Outcome.UNCHANGED:
        validators = {k: v for k, v in ((candidate.details or {}).get("validators") or {}).items() if v}
        if validators:
            store.update_state(candidate.contract, candidate.partition, **validators)
        latest = store.latest_accepted(candidate.contract, candidate.partition)
        return Recorded(candidate.id, outcome, CandidateStatus.UNCHANGED, latest.version if latest else None)
    if outcome not in (Outcome.VALID, Outcome.HEALED):
        # defence in depth: only a candidate that passed its checks may become accepted data, even when a run
        # materialises scrape/C alone and the candidate came from an interrupted run
        raise NotAcceptable(f"candidate {candidate.id} of {candidate.contract}/{candidate.partition} has outcome "
                            f"{outcome.value!r}; only valid or healed candidates are accepted")
    compared_with = (candidate.details or {}).get("previous_version")
    for _ in range(_MAX_REDECISIONS):
        try:
            version = store.accept(candidate.id, run_id=run_id, compared_with=compared_with)
            return Recorded(candidate.id, outcome, CandidateStatus.ACCEPTED, version.version)
        except StaleCandidate:
            previous = scrape.previous_of(store, candidate.contract, candidate.partition)
            violations, _, outcome = scrape.rejudge(loaded, candidate.partition, candidate.record, previous,
                                                    healed=outcome == Outcome.HEALED)
            if outcome in (Outcome.VALID, Outcome.HEALED):
                compared_with = previous.version if previous else None
                continue
            reason = "; ".join(v.message for v in violations)
            if outcome == Outcome.REVIEW_REQUIRED:
                status = store.quarantine(candidate.id, reason).status
            else:
                status = (CandidateStatus.UNCHANGED if outcome == Outcome.UNCHANGED
                          else CandidateStatus.REJECTED)
                store.set_candidate_status(candidate.id, status)
            return Recorded(candidate.id, outcome, status, previous.version if previous else None, reason or None)
    raise StoreError(f"could not accept candidate {candidate.id}: other runs kept accepting newer versions")
