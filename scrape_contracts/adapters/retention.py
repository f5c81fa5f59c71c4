"""What the retention policy keeps, read from the project store: pages and fingerprints still needed.

Queries only; the policy itself (how many days, whether each target's last accepted page stays) is in
``service/retention.py``.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrape_contracts.adapters.schema import accepted, candidates, fingerprints
from scrape_contracts.adapters.statuses import CandidateStatus

# candidates that may still become accepted data (a run between its check and its accept, a review)
OPEN_STATUSES = (CandidateStatus.PENDING, CandidateStatus.QUARANTINED)


def _latest_accepted() -> sa.Subquery:
    newest = (sa.select(accepted.c.contract, accepted.c.partition,
                        sa.func.max(accepted.c.version).label("version"))
              .group_by(accepted.c.contract, accepted.c.partition).subquery())
    return (sa.select(accepted.c.candidate_id, accepted.c.page_sha256)
            .join(newest, sa.and_(accepted.c.contract == newest.c.contract,
                                  accepted.c.partition == newest.c.partition,
                                  accepted.c.version == newest.c.version))).subquery()


def pages_to_keep(engine: Engine, since: dt.datetime, *, last_accepted: bool) -> set[str]:
    """sha256 of the pages of accepted versions and of pending candidates created since ``since``, and of
    every quarantined candidate however old (a review may still accept it, and its page is then the last
    accepted one a heal reads); with ``last_accepted`` also each target's newest accepted page, however old."""
    recent_accepted = sa.select(accepted.c.page_sha256).where(accepted.c.created_at >= since)
    recent_pending = sa.select(candidates.c.page_sha256).where(candidates.c.created_at >= since,
                                                               candidates.c.status == CandidateStatus.PENDING)
    in_review = sa.select(candidates.c.page_sha256).where(candidates.c.status == CandidateStatus.QUARANTINED)
    with engine.connect() as conn:
        keep = set(conn.execute(recent_accepted).scalars()) | set(conn.execute(recent_pending).scalars())
        keep |= set(conn.execute(in_review).scalars())
        if last_accepted:
            keep |= set(conn.execute(sa.select(_latest_accepted().c.page_sha256)).scalars())
    return {sha for sha in keep if sha}


def fingerprints_to_keep(engine: Engine, since: dt.datetime) -> set[int]:
    """Candidate ids whose fingerprints a heal may still read: each target's newest accepted version (always),
    candidates still waiting for a review, and any created since ``since``."""
    latest = sa.select(_latest_accepted().c.candidate_id)
    waiting = sa.select(candidates.c.id).where(candidates.c.status.in_(OPEN_STATUSES))
    recent = sa.select(candidates.c.id).where(candidates.c.created_at >= since)
    with engine.connect() as conn:
        ids = set(conn.execute(latest).scalars()) | set(conn.execute(waiting).scalars())
        ids |= set(conn.execute(recent).scalars())
    return {i for i in ids if i is not None}


def forget_unchanged(engine: Engine, before: dt.datetime, chunk: int = 10_000) -> int:
    """Delete the candidates of unchanged pages created before ``before``, each target's newest candidate
    excepted: one row per target per sweep that says only "nothing new" (a nightly sweep of 10,000 targets
    adds 3.6 million a year). In chunks, each its own transaction, so a year's backlog never holds the
    store's write lock for long. Returns how many went."""
    newer = candidates.alias("newer")
    doomed = (sa.select(candidates.c.id).where(
        candidates.c.status == CandidateStatus.UNCHANGED, candidates.c.created_at < before,
        # EXISTS / NOT EXISTS: PostgreSQL plans them as (anti) joins; NOT IN (subquery) it checks row by row
        sa.exists().where(newer.c.contract == candidates.c.contract, newer.c.partition == candidates.c.partition,
                          newer.c.id > candidates.c.id),
        ~sa.exists().where(fingerprints.c.candidate_id == candidates.c.id),
        ~sa.exists().where(accepted.c.candidate_id == candidates.c.id))
        .order_by(candidates.c.id).limit(chunk))
    removed = 0
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(doomed).scalars())
            if ids:
                conn.execute(candidates.delete().where(candidates.c.id.in_(ids)))
        removed += len(ids)
        if len(ids) < chunk:
            return removed
