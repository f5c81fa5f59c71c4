"""Stored element fingerprints: per field of a candidate, what healing needs once the raw page is pruned.

A small storage interface (``FingerprintStore``), as Scrapling keeps its element fingerprints behind one:
save the fingerprints of a candidate's fields, load those of one candidate, prune the ones no policy
keeps. ``SqlFingerprintStore`` keeps them in the project store's database (table ``sc_fingerprints``,
migration 0006), written after the candidate it belongs to; a crash in between leaves a candidate without
fingerprints, which heals from its kept page, or refuses, never wrongly.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrape_contracts.adapters.schema import fingerprints

DELETE_CHUNK = 500  # ids per DELETE ... IN (...): well under every database's parameter limit


@dataclass(frozen=True)
class CandidateFingerprints:
    """The fingerprints of one candidate's fields (field -> fingerprint as JSON)."""

    candidate_id: int
    contract: str
    partition: str
    fields: Mapping[str, Mapping[str, Any]]


class FingerprintStore(Protocol):
    def save(self, items: Sequence[CandidateFingerprints]) -> None:
        """Store each candidate's fingerprints (a candidate's are written once; a repeat is ignored)."""

    def load(self, candidate_id: int) -> dict[str, dict[str, Any]]:
        """field -> fingerprint of one candidate; empty when none were stored."""

    def candidates(self, contract: str | None = None) -> set[int]:
        """Ids of the candidates that have fingerprints."""

    def delete(self, candidate_ids: Iterable[int]) -> int:
        """Forget the fingerprints of these candidates; how many rows went."""


class SqlFingerprintStore:
    """``FingerprintStore`` in the project store's database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, items: Sequence[CandidateFingerprints]) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        rows = [{"candidate_id": item.candidate_id, "field": name, "contract": item.contract,
                 "partition": item.partition, "fingerprint": dict(fp), "created_at": now}
                for item in items for name, fp in item.fields.items()]
        if not rows:
            return
        with self.engine.begin() as conn:
            ids = sorted({r["candidate_id"] for r in rows})
            known = set(conn.execute(sa.select(fingerprints.c.candidate_id).distinct()
                                     .where(fingerprints.c.candidate_id.in_(ids))).scalars())
            fresh = [r for r in rows if r["candidate_id"] not in known]
            if fresh:
                conn.execute(fingerprints.insert(), fresh)

    def load(self, candidate_id: int) -> dict[str, dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(fingerprints.c.field, fingerprints.c.fingerprint)
                                .where(fingerprints.c.candidate_id == candidate_id)).all()
        return {row.field: dict(row.fingerprint) for row in rows}

    def candidates(self, contract: str | None = None) -> set[int]:
        query = sa.select(fingerprints.c.candidate_id).distinct()
        if contract is not None:
            query = query.where(fingerprints.c.contract == contract)
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def delete(self, candidate_ids: Iterable[int]) -> int:
        ids = sorted(set(candidate_ids))
        removed = 0
        with self.engine.begin() as conn:
            for start in range(0, len(ids), DELETE_CHUNK):
                chunk = ids[start:start + DELETE_CHUNK]
                removed += conn.execute(fingerprints.delete()
                                        .where(fingerprints.c.candidate_id.in_(chunk))).rowcount or 0
        return removed
