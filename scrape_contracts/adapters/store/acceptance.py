"""Accepted versions: accepting a candidate exactly once, and reading what was accepted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import accepted, candidates
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, OutboxKind
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.errors import AlreadyAccepted, StaleCandidate, StoreError
from scrape_contracts.adapters.store.leases import check_fence
from scrape_contracts.adapters.store.rows import AcceptedVersion, accepted_of, candidate_of, utc_now
from scrape_contracts.adapters.store.state import (
    count_streaks, lock_partition, release_review_pause, set_status, write_state,
)


class AcceptedMixin(Connected):
    def accept(self, candidate_id: int, *, run_id: str, source: AcceptSource = AcceptSource.SCRAPE,
               reviewer: str | None = None, reason: str | None = None,
               allowed_status: Sequence[CandidateStatus] = (CandidateStatus.PENDING,),
               compared_with: int | None | type(...) = ...) -> AcceptedVersion:
        """Make a candidate the newest accepted version of its partition, exactly once.

        ``compared_with``: the accepted version the candidate was diffed against (None: there was none).
        When another version was accepted since, StaleCandidate is raised and nothing changes: the caller
        diffs against the newest and decides again (two overlapping runs never both pass the change limit
        against the same old version).
        """
        with self._tx() as conn:
            return self._accept(conn, candidate_id, run_id=run_id, source=source, reviewer=reviewer,
                                reason=reason, allowed_status=allowed_status, compared_with=compared_with)

    def _accept(self, conn: Connection, candidate_id: int, *, run_id: str, source: AcceptSource,
                reviewer: str | None, reason: str | None, allowed_status: Sequence[CandidateStatus],
                compared_with: int | None | type(...) = ...) -> AcceptedVersion:
        row = conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).first()
        if row is None:
            raise StoreError(f"candidate {candidate_id} does not exist")
        cand = candidate_of(row)
        check_fence(conn, self, [(cand.contract, cand.partition)])
        lock_partition(conn, cand.contract, cand.partition)
        # re-read under the lock: a racing run may have accepted it meanwhile
        status = conn.execute(sa.select(candidates.c.status).where(candidates.c.id == candidate_id)).scalar_one()
        if status == CandidateStatus.ACCEPTED:
            raise AlreadyAccepted(f"candidate {candidate_id} of {cand.contract}/{cand.partition} is already accepted")
        if status not in allowed_status:
            raise StoreError(f"candidate {candidate_id} of {cand.contract}/{cand.partition} is {status}, "
                             f"not {' or '.join(allowed_status)}")
        newest = conn.execute(
            sa.select(sa.func.max(accepted.c.version))
            .where(accepted.c.contract == cand.contract, accepted.c.partition == cand.partition)
        ).scalar() or 0
        if compared_with is not ... and newest != (compared_with or 0):
            raise StaleCandidate(f"candidate {candidate_id} of {cand.contract}/{cand.partition} was compared with "
                                 f"version {compared_with or 0}, but version {newest} is the newest now", newest)
        version = newest + 1
        try:
            conn.execute(accepted.insert().values(
                contract=cand.contract, partition=cand.partition, version=version, record=cand.record,
                url=cand.url, candidate_id=cand.id, run_id=run_id, page_sha256=cand.page_sha256,
                source=source, reviewer=reviewer, reason=reason, created_at=utc_now(),
            ))
        except IntegrityError as exc:
            raise AlreadyAccepted(f"candidate {candidate_id} raced with another accept: {exc.orig}") from None
        set_status(conn, candidate_id, CandidateStatus.ACCEPTED)
        count_streaks(conn, failed=[], succeeded=[(cand.contract, cand.partition)])
        _outbox.write(conn, OutboxKind.ACCEPTED, [(cand.contract, cand.partition, version, {
            "candidate_id": cand.id, "previous_version": newest or None, "source": AcceptSource(source).value,
            "reviewer": reviewer, "reason": reason, "run_id": run_id})])
        # anything still waiting for review on this partition is now older than the accepted data
        superseded = conn.execute(
            candidates.update()
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id < candidate_id)
            .values(status=CandidateStatus.SUPERSEDED)
        ).rowcount
        if superseded:
            # a run that overlapped a quarantine (or was launched by hand) made the review moot; a target
            # left paused with nothing to review would be skipped by its schedule until someone noticed
            release_review_pause(conn, cand.contract, cand.partition)
        validators = (cand.details or {}).get("validators") or {}
        write_state(conn, cand.contract, cand.partition, heal_attempts=0, last_page_sha256=cand.page_sha256,
                      etag=validators.get("etag"), last_modified=validators.get("last_modified"))
        return AcceptedVersion(cand.contract, cand.partition, version, cand.record, cand.url, cand.id, run_id,
                               cand.page_sha256, source, reviewer, reason, utc_now())

    def last_pages(self, contract: str, partitions: Sequence[str]) -> dict[str, str]:
        """partition → sha256 of the page its newest candidate was extracted from (what re-extraction reads)."""
        newest = (sa.select(sa.func.max(candidates.c.id).label("id"))
                  .where(candidates.c.contract == contract, candidates.c.partition.in_(list(partitions)),
                         candidates.c.page_sha256.is_not(None))
                  .group_by(candidates.c.partition).subquery())
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates.c.partition, candidates.c.page_sha256)
                                .join(newest, candidates.c.id == newest.c.id)).all()
        return {r.partition: r.page_sha256 for r in rows}

    def accepted_basis(self, contract: str, partitions: Sequence[str]) -> dict[str, tuple[int | None, str | None]]:
        """partition → (selector version, contract fingerprint) its newest accepted record was extracted under."""
        newest = (sa.select(accepted.c.partition, sa.func.max(accepted.c.version).label("version"))
                  .where(accepted.c.contract == contract, accepted.c.partition.in_(list(partitions)))
                  .group_by(accepted.c.partition).subquery())
        query = (sa.select(accepted.c.partition, candidates.c.selector_version, candidates.c.details)
                 .join(newest, sa.and_(accepted.c.partition == newest.c.partition,
                                       accepted.c.version == newest.c.version))
                 .join(candidates, candidates.c.id == accepted.c.candidate_id)
                 .where(accepted.c.contract == contract))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {r.partition: (r.selector_version, (r.details or {}).get("contract_fingerprint")) for r in rows}

    def latest_accepted(self, contract: str, partition: str) -> AcceptedVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(accepted)
                .where(accepted.c.contract == contract, accepted.c.partition == partition)
                .order_by(accepted.c.version.desc()).limit(1)
            ).first()
        return accepted_of(row) if row else None

    def accepted_history(self, contract: str, partition: str) -> list[AcceptedVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(accepted)
                .where(accepted.c.contract == contract, accepted.c.partition == partition)
                .order_by(accepted.c.version)
            ).all()
        return [accepted_of(r) for r in rows]

    def accepted_versions(self, contract: str, partition: str, versions: Sequence[int]) -> dict[int, AcceptedVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(accepted).where(
                accepted.c.contract == contract, accepted.c.partition == partition,
                accepted.c.version.in_(list(versions)))).all()
        return {r.version: accepted_of(r) for r in rows}

    def latest_accepted_all(self, contract: str, partitions: Sequence[str] | None = None, *,
                            as_of: dt.datetime | None = None) -> list[AcceptedVersion]:
        """The newest accepted version of each target (``as_of``: the newest accepted at or before then)."""
        # the newest versions of the partitions asked for only: a batched run asks for its own
        mine = [accepted.c.partition.in_(list(partitions))] if partitions is not None else []
        newest = sa.select(accepted.c.partition, sa.func.max(accepted.c.version).label("version")).where(
            accepted.c.contract == contract, *mine)
        if as_of is not None:
            newest = newest.where(accepted.c.created_at <= as_of)
        newest = newest.group_by(accepted.c.partition).subquery()
        query = sa.select(accepted).join(
            newest, sa.and_(accepted.c.partition == newest.c.partition, accepted.c.version == newest.c.version)
        ).where(accepted.c.contract == contract, *mine)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(accepted.c.partition)).all()
        return [accepted_of(r) for r in rows]
