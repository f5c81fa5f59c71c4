"""Targets found by discovery: recorded with their source, marked gone (never deleted) and back again.

A discovery run hands over every URL it found, keyed, with the source that found it, and the sources it
read completely. In one transaction: new targets are added, targets found again are "seen" (and back when
they were gone), and a target whose source was read completely without listing it (or whose source is no
longer declared) is marked gone. A source that failed part-way marks nothing gone: a sitemap that answered
503 once must not take every target with it. Targets added by hand, a file or the API have no source and
are never marked gone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite

from scrape_contracts.adapters.schema import partition_state, targets
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.rows import utc_now


@dataclass(frozen=True)
class FoundTarget:
    url: str
    source: str
    lastmod: dt.datetime | None = None


@dataclass(frozen=True)
class DiscoveryChanges:
    """What one discovery run changed, by partition key."""

    new: list[str] = field(default_factory=list)
    back: list[str] = field(default_factory=list)  # were gone, listed again
    gone: list[str] = field(default_factory=list)
    seen: int = 0  # found again, listed before too


@dataclass(frozen=True)
class KnownTarget:
    partition: str
    url: str
    source: str | None
    seen_at: dt.datetime | None
    lastmod: dt.datetime | None
    gone_at: dt.datetime | None


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands timestamps back naive (they were written in UTC)
    return value.replace(tzinfo=dt.timezone.utc) if value is not None and value.tzinfo is None else value


class DiscoveredTargetsMixin(Connected):
    """Per dynamic target: the source that found it, when, its lastmod, and whether it is gone."""

    def record_discovery(self, contract: str, found: Mapping[str, FoundTarget], *, complete: Collection[str],
                         declared: Collection[str], keep_lastmod: bool, now: dt.datetime | None = None,
                         ) -> DiscoveryChanges:
        """Record a discovery run of ``contract`` (see the module); ``complete``: the sources read in full,
        ``declared``: every source the contract has now; ``keep_lastmod``: store lastmod (skip_unchanged)."""
        now = now or utc_now()
        with self._tx() as conn:
            rows = {r.partition: r for r in conn.execute(
                sa.select(targets.c.partition, targets.c.source, targets.c.lastmod, targets.c.gone_at)
                .where(targets.c.contract == contract))}
            new = sorted(key for key in found if key not in rows)
            if new:
                conn.execute(_insert_new(conn), [
                    {"contract": contract, "partition": key, "url": found[key].url,
                     "source": found[key].source, "seen_at": now, "created_at": now,
                     "lastmod": found[key].lastmod if keep_lastmod else None}
                    for key in new])
            again = [key for key in found if key in rows]
            back = sorted(key for key in again if rows[key].gone_at is not None)
            # only rows whose source or lastmod moved are written one by one: a sweep of a large sitemap that
            # did not change is a few statements, not one per target
            moved = []
            for key in again:
                row, target = rows[key], found[key]
                source = target.source if row.source is not None else None  # added by hand: stays so
                lastmod = target.lastmod if keep_lastmod else None
                if source != row.source or lastmod != _aware(row.lastmod):
                    moved.append({"k": key, "s": source, "m": lastmod})
            if moved:
                conn.execute(targets.update().where(
                    targets.c.contract == contract, targets.c.partition == sa.bindparam("k"),
                ).values(source=sa.bindparam("s", type_=sa.Text),
                         lastmod=sa.bindparam("m", type_=targets.c.lastmod.type)), moved)
            _set_where(conn, contract, again, seen_at=now)
            _set_where(conn, contract, back, gone_at=None)
            gone = sorted(key for key, row in rows.items()
                          if key not in found and row.source is not None and row.gone_at is None
                          and (row.source in complete or row.source not in declared))
            _set_where(conn, contract, gone, gone_at=now)
        return DiscoveryChanges(new=new, back=back, gone=gone, seen=len(again) - len(back))

    def gone_targets(self, contract: str) -> dict[str, dt.datetime]:
        """partition key → since when its source no longer lists it."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(targets.c.partition, targets.c.gone_at).where(
                targets.c.contract == contract, targets.c.gone_at.is_not(None))).all()
        return {r.partition: _aware(r.gone_at) for r in rows}

    def known_targets(self, contract: str) -> dict[str, KnownTarget]:
        """Every dynamic target of ``contract`` with what discovery knows of it."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(targets).where(targets.c.contract == contract)
                                .order_by(targets.c.partition)).all()
        return {r.partition: KnownTarget(r.partition, r.url, r.source, _aware(r.seen_at), _aware(r.lastmod),
                                         _aware(r.gone_at)) for r in rows}

    def skipped_partitions(self, contract: str, *, unchanged: bool = False) -> dict[str, str]:
        """The targets a sweep leaves out, and why: paused ones, those gone from their source, and with
        ``unchanged`` (the contract's ``discover.skip_unchanged``) those whose lastmod is not after their
        last successful scrape."""
        skipped = {key: f"gone from its source since {when:%Y-%m-%d %H:%M} UTC"
                   for key, when in self.gone_targets(contract).items()}
        if unchanged:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    sa.select(targets.c.partition, targets.c.lastmod, partition_state.c.last_success_at)
                    .join(partition_state, sa.and_(partition_state.c.contract == targets.c.contract,
                                                   partition_state.c.partition == targets.c.partition))
                    .where(targets.c.contract == contract, targets.c.lastmod.is_not(None),
                           partition_state.c.last_success_at.is_not(None))).all()
            for row in rows:
                lastmod, success = _aware(row.lastmod), _aware(row.last_success_at)
                if lastmod <= success and row.partition not in skipped:
                    skipped[row.partition] = (f"unchanged: lastmod {lastmod:%Y-%m-%d %H:%M} is not after its "
                                              f"last scrape ({success:%Y-%m-%d %H:%M} UTC)")
        # a pause says the most (a person's, a review's): it wins over the others
        skipped.update(self.paused_partitions(contract))  # type: ignore[attr-defined]
        return skipped


_CHUNK = 500  # keys per IN (...): well under every database's limit on bound parameters


def _set_where(conn: sa.Connection, contract: str, keys: Sequence[str], **values: object) -> None:
    for i in range(0, len(keys), _CHUNK):
        conn.execute(targets.update().where(targets.c.contract == contract,
                                            targets.c.partition.in_(keys[i:i + _CHUNK])).values(**values))


def _insert_new(conn: sa.Connection) -> Any:
    """An insert that leaves a row another discovery run of the contract has just added (PostgreSQL runs
    them side by side; SQLite's write lock takes them in turn)."""
    if conn.dialect.name == "postgresql":
        return sa.dialects.postgresql.insert(targets).on_conflict_do_nothing()
    return sa.dialects.sqlite.insert(targets).on_conflict_do_nothing()
