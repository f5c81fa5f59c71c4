"""Candidates: storing them, recording a chunk of them with their actions, quarantine, the review queue."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import accepted, candidates
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, OutboxKind
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.leases import check_fence
from scrape_contracts.adapters.store.rows import (
    STATUS_OF, Candidate, CandidateAction, NewCandidate, RecordedCandidate, candidate_of, utc_now,
)
from scrape_contracts.adapters.store.state import (
    REVIEW_PAUSE, count_streaks, lock_partition, lock_partitions, release_review_pause, set_status,
    write_state, write_states,
)
from scrape_contracts.engine.outcome import Outcome


class CandidatesMixin(Connected):
    def add_candidate(self, *, contract: str, partition: str, run_id: str, url: str, record: dict[str, Any],
                      outcome: Outcome, details: dict[str, Any], page_sha256: str | None,
                      selector_version: int | None) -> Candidate:
        with self._tx() as conn:
            check_fence(conn, self, [(contract, partition)])
            row = conn.execute(
                candidates.insert().values(
                    contract=contract, partition=partition, run_id=run_id, url=url, record=record,
                    outcome=outcome, status=CandidateStatus.PENDING, details=details, page_sha256=page_sha256,
                    selector_version=selector_version, created_at=utc_now(),
                ).returning(*candidates.c)
            ).one()
        return candidate_of(row)

    def candidate(self, candidate_id: int) -> Candidate | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).first()
        return candidate_of(row) if row else None

    def latest_candidate(self, contract: str, partition: str, run_id: str | None = None) -> Candidate | None:
        query = sa.select(candidates).where(candidates.c.contract == contract, candidates.c.partition == partition)
        if run_id is not None:
            query = query.where(candidates.c.run_id == run_id)
        with self.engine.connect() as conn:
            row = conn.execute(query.order_by(candidates.c.id.desc()).limit(1)).first()
        return candidate_of(row) if row else None

    def latest_candidates(self, contract: str) -> dict[str, Candidate]:
        """partition → its newest candidate, for every target of ``contract``, in one query."""
        newest = (sa.select(sa.func.max(candidates.c.id)).where(candidates.c.contract == contract)
                  .group_by(candidates.c.partition).scalar_subquery())
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates).where(candidates.c.id.in_(newest))).all()
        return {row.partition: candidate_of(row) for row in rows}

    def recorded_by_run(self, contract: str, run_id: str, partitions: list[str]) -> dict[str, Candidate]:
        """partition → the newest candidate ``run_id`` recorded for it, for those of ``partitions`` it recorded
        (through the (contract, partition) index: a few rows per partition, whatever the run's size)."""
        found: dict[str, Candidate] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(partitions), 500):  # bounded IN lists
                rows = conn.execute(sa.select(candidates).where(
                    candidates.c.contract == contract, candidates.c.partition.in_(partitions[start:start + 500]),
                    candidates.c.run_id == run_id).order_by(candidates.c.id)).all()
                found.update((row.partition, candidate_of(row)) for row in rows)
        return found

    def candidates_of_run(self, run_id: str) -> list[Candidate]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates).where(candidates.c.run_id == run_id)
                                .order_by(candidates.c.id)).all()
        return [candidate_of(r) for r in rows]

    def set_candidate_status(self, candidate_id: int, status: CandidateStatus) -> None:
        with self._tx() as conn:
            check_fence(conn, self, [_key_of(conn, candidate_id)])
            conn.execute(candidates.update().where(candidates.c.id == candidate_id).values(status=status))

    def quarantine(self, candidate_id: int, reason: str) -> Candidate:
        """Hold a candidate for review and pause its partition; older pending reviews are superseded.

        When two runs of a partition overlap, this one's quarantine can land after a newer candidate was
        accepted or quarantined: then this candidate is superseded on arrival and nothing is paused for it.
        """
        with self._tx() as conn:
            check_fence(conn, self, [_key_of(conn, candidate_id)])
            self._quarantine(conn, candidate_id, reason)
        return self.candidate(candidate_id)  # type: ignore[return-value]

    def _quarantine(self, conn: Connection, candidate_id: int, reason: str) -> CandidateStatus:
        cand = candidate_of(conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).one())
        lock_partition(conn, cand.contract, cand.partition)
        newer = conn.execute(
            sa.select(sa.func.count()).select_from(candidates)
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.id > candidate_id,
                   candidates.c.status.in_((CandidateStatus.ACCEPTED, CandidateStatus.QUARANTINED)))
        ).scalar()
        if newer:
            # reviewing it could only make older data the newest accepted version (decide refuses that)
            set_status(conn, candidate_id, CandidateStatus.SUPERSEDED)
            return CandidateStatus.SUPERSEDED
        conn.execute(
            candidates.update()
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id < candidate_id)
            .values(status=CandidateStatus.SUPERSEDED)
        )
        set_status(conn, candidate_id, CandidateStatus.QUARANTINED)
        write_state(conn, cand.contract, cand.partition, paused=True, pause_reason=f"{REVIEW_PAUSE}: {reason}")
        # the page was read and extracted: the row of failures ends here (not a success: no new data yet)
        count_streaks(conn, failed=[], succeeded=[], ended=[(cand.contract, cand.partition)])
        _outbox.write(conn, OutboxKind.QUARANTINED, [(cand.contract, cand.partition, candidate_id, {
            "candidate_id": candidate_id, "reason": reason, "run_id": cand.run_id})])
        return CandidateStatus.QUARANTINED

    def record_candidates(self, items: Sequence[NewCandidate]) -> list[RecordedCandidate]:
        """Store candidates and apply each one's action, all in one transaction.

        The batch path records a chunk of targets at once: a crash leaves either all of them or none, and a
        re-run finds the accepted ones unchanged, so nothing is accepted twice. Statements are per chunk,
        not per target (a per-target accept is ten statements; at thousands of targets that was most of a
        batch's time on SQLite and a round trip each on PostgreSQL).
        """
        if not items:
            return []
        now = utc_now()
        with self._tx() as conn:
            # before anything is written: a holder that lost a lease gets LeaseLost and the chunk rolls back
            check_fence(conn, self, {(i.contract, i.partition) for i in items})
            lock_partitions(conn, {(i.contract, i.partition) for i in items})
            next_version = self._next_versions(conn, [i for i in items if i.action == CandidateAction.ACCEPT])
            # compare-and-swap: an accept diffed against a version that is no longer the newest is not
            # recorded here; the caller decides again against the newest (see accept)
            newest = {key: version - 1 for key, version in next_version.items()}
            stale, accepting = set(), set()
            for n, item in enumerate(items):
                if item.action != CandidateAction.ACCEPT:
                    continue
                key = (item.contract, item.partition)
                # a second accept of one partition in a chunk was compared with the same old version too
                if key in accepting or newest[key] != (item.compared_with or 0):
                    stale.add(n)
                accepting.add(key)
            fresh = [i for n, i in enumerate(items) if n not in stale]
            recorded = self._record_fresh(conn, fresh, next_version, now) if fresh else []
        done = iter(recorded)
        return [RecordedCandidate(0, None, newest[(i.contract, i.partition)], stale=True) if n in stale
                else next(done)
                for n, i in enumerate(items)]

    def _record_fresh(self, conn: Connection, items: Sequence[NewCandidate],
                      next_version: dict[tuple[str, str], int], now: dt.datetime) -> list[RecordedCandidate]:
        rows = conn.execute(candidates.insert().returning(candidates.c.id, sort_by_parameter_order=True), [{
            "contract": i.contract, "partition": i.partition, "run_id": i.run_id, "url": i.url,
            "record": i.record, "outcome": i.outcome,
            "status": STATUS_OF.get(i.action, CandidateStatus.PENDING),
            "details": i.details, "page_sha256": i.page_sha256, "selector_version": i.selector_version,
            "created_at": now} for i in items]).all()
        ids = [row.id for row in rows]
        accepted_now = [(cid, i) for cid, i in zip(ids, items, strict=True)
                        if i.action == CandidateAction.ACCEPT]
        versions: dict[int, int] = {}
        for cid, item in accepted_now:
            versions[cid] = next_version[(item.contract, item.partition)]
            next_version[(item.contract, item.partition)] += 1
        if accepted_now:
            conn.execute(accepted.insert(), [{
                "contract": i.contract, "partition": i.partition, "version": versions[cid], "record": i.record,
                "url": i.url, "candidate_id": cid, "run_id": i.run_id, "page_sha256": i.page_sha256,
                "source": AcceptSource.SCRAPE, "reviewer": None, "reason": None, "created_at": now}
                for cid, i in accepted_now])
            _outbox.write(conn, OutboxKind.ACCEPTED, [
                (i.contract, i.partition, versions[cid], {"candidate_id": cid, "previous_version": versions[cid] - 1
                                                          or None, "source": AcceptSource.SCRAPE.value,
                                                          "run_id": i.run_id})
                for cid, i in accepted_now])
            self._supersede_reviews(conn, [i for _, i in accepted_now])
            write_states(conn, ("heal_attempts", "last_page_sha256", "etag", "last_modified"), [{
                "c": i.contract, "p": i.partition, "heal_attempts": 0, "last_page_sha256": i.page_sha256,
                "etag": (i.validators or {}).get("etag"), "last_modified": (i.validators or {}).get("last_modified"),
                "updated_at": now} for _, i in accepted_now])
        retagged = [i for i in items if i.action == CandidateAction.UNCHANGED and i.validators]
        if retagged:
            # same data under new validators (a re-tagged page): remember them, so the next run gets a 304
            write_states(conn, ("etag", "last_modified"), [{
                "c": i.contract, "p": i.partition, "etag": i.validators.get("etag"),
                "last_modified": i.validators.get("last_modified"), "updated_at": now} for i in retagged])
        count_streaks(conn, failed=[(i.contract, i.partition, i.reason or "rejected") for i in items
                                     if i.action == CandidateAction.REJECT],
                       succeeded=[(i.contract, i.partition) for i in items
                                  if i.action in (CandidateAction.ACCEPT, CandidateAction.UNCHANGED)])
        recorded = []
        for cid, item in zip(ids, items, strict=True):
            if item.action == CandidateAction.QUARANTINE:
                recorded.append(RecordedCandidate(cid, self._quarantine(conn, cid, item.reason or "review")))
            else:
                recorded.append(RecordedCandidate(cid, STATUS_OF.get(item.action, CandidateStatus.PENDING),
                                                  versions.get(cid)))
        return recorded

    @staticmethod
    def _next_versions(conn: Connection, items: Sequence[NewCandidate]) -> dict[tuple[str, str], int]:
        """(contract, partition) → the version its next accepted record gets (read under the partition locks)."""
        found: dict[tuple[str, str], int] = {}
        for contract in {i.contract for i in items}:
            parts = sorted({i.partition for i in items if i.contract == contract})
            rows = conn.execute(sa.select(accepted.c.partition, sa.func.max(accepted.c.version)).where(
                accepted.c.contract == contract, accepted.c.partition.in_(parts)).group_by(accepted.c.partition))
            newest = dict(rows.all())
            found.update({(contract, p): (newest.get(p) or 0) + 1 for p in parts})
        return found

    def _supersede_reviews(self, conn: Connection, items: Sequence[NewCandidate]) -> None:
        """Reviews still waiting on a partition whose new data was just accepted are moot (see ``_accept``)."""
        for contract in {i.contract for i in items}:
            parts = sorted({i.partition for i in items if i.contract == contract})
            waiting = set(conn.execute(sa.select(candidates.c.partition).distinct().where(
                candidates.c.contract == contract, candidates.c.partition.in_(parts),
                candidates.c.status == CandidateStatus.QUARANTINED)).scalars())
            if not waiting:
                continue
            conn.execute(candidates.update().where(
                candidates.c.contract == contract, candidates.c.partition.in_(sorted(waiting)),
                candidates.c.status == CandidateStatus.QUARANTINED).values(status=CandidateStatus.SUPERSEDED))
            for partition in sorted(waiting):
                release_review_pause(conn, contract, partition)

    def failed_checks(self, contract: str, partitions: Sequence[str]) -> dict[str, set[str]]:
        """partition → the checks its latest candidate failed (so a batch can record that they pass now)."""
        newest = (sa.select(sa.func.max(candidates.c.id).label("id"))
                  .where(candidates.c.contract == contract, candidates.c.partition.in_(list(partitions)))
                  .group_by(candidates.c.partition).subquery())
        # only the violations leave the database: a candidate's details hold its whole previous record too,
        # and decoding them all was most of this query's time on an unchanged sweep
        violations = candidates.c.details["violations"].label("violations")
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates.c.partition, violations)
                                .join(newest, candidates.c.id == newest.c.id)).all()
        failed = {}
        for row in rows:
            checks = {v["check"] for v in (row.violations or [])}
            if checks:
                failed[row.partition] = checks
        return failed

    def quarantined(self, after_id: int = 0, limit: int = 100) -> list[Candidate]:
        """Candidates quarantined (and still waiting) with id > after_id, oldest first: the review cursor."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(candidates)
                .where(candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id > after_id)
                .order_by(candidates.c.id).limit(limit)
            ).all()
        return [candidate_of(r) for r in rows]

    def pending_review(self, contract: str, partition: str) -> Candidate | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(candidates)
                .where(candidates.c.contract == contract, candidates.c.partition == partition,
                       candidates.c.status == CandidateStatus.QUARANTINED)
                .order_by(candidates.c.id.desc()).limit(1)
            ).first()
        return candidate_of(row) if row else None


def _key_of(conn: Connection, candidate_id: int) -> tuple[str, str]:
    row = conn.execute(sa.select(candidates.c.contract, candidates.c.partition)
                       .where(candidates.c.id == candidate_id)).one()
    return row.contract, row.partition
