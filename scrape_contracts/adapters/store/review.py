"""Reviews: accepting or rejecting the quarantined candidate of a target, recording who and why."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import accepted, candidates, reviews
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, Decision, OutboxKind
from scrape_contracts.adapters.store.acceptance import AcceptedMixin
from scrape_contracts.adapters.store.errors import NothingToReview, StoreError, Superseded
from scrape_contracts.adapters.store.rows import Candidate, Review, candidate_of, utc_now
from scrape_contracts.adapters.store.state import (
    lock_partition, release_review_pause, set_status, write_state,
)


class ReviewMixin(AcceptedMixin):
    def decide(self, contract: str, partition: str, decision: Decision | str, *, reviewer: str, reason: str,
               run_id: str | None = None, candidate_id: int | None = None) -> Review:
        """Accept or reject the quarantined candidate of a partition, recording who and why."""
        if decision not in tuple(Decision):
            raise StoreError(f"decision must be 'accept' or 'reject', not {decision!r}")
        decision = Decision(decision)
        if not reviewer.strip() or not reason.strip():
            raise StoreError("a review needs a reviewer and a reason")
        with self._tx() as conn:
            lock_partition(conn, contract, partition)
            query = sa.select(candidates).where(candidates.c.contract == contract,
                                                candidates.c.partition == partition)
            if candidate_id is not None:
                row = conn.execute(query.where(candidates.c.id == candidate_id)).first()
                if row is None:
                    raise NothingToReview(f"{contract}/{partition} has no candidate {candidate_id}")
                cand = candidate_of(row)
                if cand.status in (CandidateStatus.SUPERSEDED, CandidateStatus.ACCEPTED,
                                   CandidateStatus.REJECTED):
                    raise Superseded(
                        f"candidate {candidate_id} of {contract}/{partition} is {cand.status}: "
                        "a newer candidate or decision replaced it; review the current one instead"
                    )
            else:
                row = conn.execute(query.where(candidates.c.status == CandidateStatus.QUARANTINED)
                                   .order_by(candidates.c.id.desc()).limit(1)).first()
                if row is None:
                    raise NothingToReview(f"{contract}/{partition} has nothing quarantined to review")
                cand = candidate_of(row)
            if cand.status != CandidateStatus.QUARANTINED:
                raise NothingToReview(f"candidate {cand.id} of {contract}/{partition} is {cand.status}, "
                                      "not quarantined")
            newer = conn.execute(
                sa.select(sa.func.count()).select_from(accepted)
                .join(candidates, accepted.c.candidate_id == candidates.c.id)
                .where(accepted.c.contract == contract, accepted.c.partition == partition,
                       candidates.c.id > cand.id)
            ).scalar()
            version: int | None = None
            stale: Superseded | None = None
            if newer:
                # recorded before refusing (raising in here would roll it back, leaving the candidate waiting
                # and the target paused for a review nobody can make)
                set_status(conn, cand.id, CandidateStatus.SUPERSEDED)
                release_review_pause(conn, contract, partition)
                stale = Superseded(f"candidate {cand.id} of {contract}/{partition} was superseded by newer "
                                   "accepted data; nothing to decide")
            else:
                version = self._decide(conn, cand, decision, reviewer=reviewer, reason=reason, run_id=run_id)
        if stale is not None:
            raise stale
        return Review(contract, partition, cand.id, decision, reviewer, reason, run_id, version)

    def _decide(self, conn: Connection, cand: Candidate, decision: Decision, *, reviewer: str, reason: str,
                run_id: str | None) -> int | None:
        """Record the decision on a quarantined candidate; the accepted version when it was accepted."""
        contract, partition = cand.contract, cand.partition
        version = None
        if decision == Decision.ACCEPT:
            version = self._accept(conn, cand.id, run_id=run_id or "", source=AcceptSource.REVIEW,
                                   reviewer=reviewer, reason=reason,
                                   allowed_status=(CandidateStatus.QUARANTINED,)).version
        else:
            set_status(conn, cand.id, CandidateStatus.REJECTED)
            _outbox.write(conn, OutboxKind.REJECTED_BY_REVIEW, [(contract, partition, cand.id, {
                "candidate_id": cand.id, "reviewer": reviewer, "reason": reason, "run_id": run_id})])
        conn.execute(reviews.insert().values(
            contract=contract, partition=partition, candidate_id=cand.id, decision=decision,
            reviewer=reviewer, reason=reason, run_id=run_id, created_at=utc_now(),
        ))
        write_state(conn, contract, partition, paused=False, pause_reason=None, heal_attempts=0)
        return version
