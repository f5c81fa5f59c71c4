"""Target leases with a fencing token: one holder per target at a time, and commits only from the holder.

A holder (a run) takes a target's lease before scraping it: a free or expired lease is taken, and the
target's token grows by one; a live lease of another holder is refused (``TargetBusy``, saying who holds it
and until when); the holder's own live lease is extended. The holder renews it while it works and releases
it at the end. Every commit for a target made through a ``fenced`` store checks, in the commit's own
transaction, that the lease row still carries the holder's token and has not expired: a holder that was
paused past its lease (and maybe taken over) gets ``LeaseLost`` and its commit writes nothing.

The rows are locked in one order (partition key, after any missing rows were inserted), as the partition
states are (``state._lock_partitions`` says why that order cannot deadlock); on SQLite the transaction's
BEGIN IMMEDIATE holds the whole store. Time is the store's ``clock``.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy.engine import Connection

from scrape_contracts.adapters.schema import leases
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.errors import LeaseLost, LostLease, TargetBusy
from scrape_contracts.adapters.store.rows import Lease, lease_of

SQLITE_PAGE = 500  # partition keys per SQLite statement (an IN list: under its parameter limit)
PG_PAGE = 20_000  # PostgreSQL takes them as one array parameter: a 20,000-target batch in one statement

_Store = TypeVar("_Store", bound="LeasesMixin")


@dataclass(frozen=True)
class LeaseGrant:
    """What ``take_leases`` got: the leases taken (or extended), and the live leases of other holders."""

    taken: tuple[Lease, ...]
    refused: tuple[Lease, ...]


class LeasesMixin(Connected):
    def take_leases(self, contract: str, partitions: Iterable[str], *, holder: str, duration: dt.timedelta,
                    replace: Mapping[str, int] | None = None) -> LeaseGrant:
        """Take the leases of many targets in one transaction (see the module's docstring).

        ``replace``: partition → token of a live lease to take over anyway (its holder is known to have
        ended); a lease whose token moved on meanwhile is refused as usual.
        """
        now = self.clock()
        until = now + duration
        wanted = sorted(set(partitions))
        replace = dict(replace or {})
        taken: list[Lease] = []
        refused: list[Lease] = []
        with self._tx() as conn:
            _insert_missing(conn, contract, wanted, now)
            bump, extend = [], []
            for lease in _locked(conn, contract, wanted):
                if lease.holder == holder and lease.live(now):
                    extend.append(lease.partition)
                    taken.append(Lease(contract, lease.partition, holder, lease.token, lease.taken_at, until))
                elif not lease.live(now) or replace.get(lease.partition) == lease.token:
                    bump.append(lease.partition)
                    taken.append(Lease(contract, lease.partition, holder, lease.token + 1, now, until))
                else:
                    refused.append(lease)
            for page in _pages(conn, bump):
                conn.execute(leases.update().where(leases.c.contract == contract, _among(conn, page))
                             .values(holder=holder, token=leases.c.token + 1, taken_at=now, expires_at=until))
            for page in _pages(conn, extend):
                conn.execute(leases.update().where(leases.c.contract == contract, _among(conn, page))
                             .values(expires_at=until))
        return LeaseGrant(tuple(taken), tuple(refused))

    def take_lease(self, contract: str, partition: str, *, holder: str, duration: dt.timedelta,
                   replace: int | None = None) -> Lease:
        """One target's lease; ``TargetBusy`` when another holder's is live."""
        grant = self.take_leases(contract, [partition], holder=holder, duration=duration,
                                 replace={partition: replace} if replace is not None else None)
        if grant.refused:
            raise TargetBusy(grant.refused[0])
        return grant.taken[0]

    def renew_leases(self, held: Sequence[Lease], duration: dt.timedelta) -> tuple[list[Lease], list[LostLease]]:
        """Push the expiry of leases still held (same token, not expired) ``duration`` past now, in one
        transaction; (renewed, lost)."""
        now = self.clock()
        until = now + duration
        renewed: list[Lease] = []
        lost: list[LostLease] = []
        with self._tx() as conn:
            for contract, mine in sorted(_by_contract(held).items()):
                current = {lease.partition: lease for lease in _locked(conn, contract, sorted(mine))}
                ours = []
                for partition, lease in sorted(mine.items()):
                    row = current.get(partition)
                    if _still_held(lease, row, now):
                        ours.append(partition)
                        renewed.append(Lease(contract, partition, lease.holder, lease.token, lease.taken_at, until))
                    else:
                        lost.append(LostLease(contract, partition, lease.holder, lease, row))
                for page in _pages(conn, ours):
                    conn.execute(leases.update().where(leases.c.contract == contract, _among(conn, page))
                                 .values(expires_at=until))
        return renewed, lost

    def renew_lease(self, lease: Lease, duration: dt.timedelta) -> Lease:
        renewed, lost = self.renew_leases([lease], duration)
        if lost:
            raise LeaseLost(lost)
        return renewed[0]

    def release_leases(self, held: Sequence[Lease]) -> None:
        """End leases still held now (another holder may take the targets at once); lost ones stay as they are."""
        now = self.clock()
        with self._tx() as conn:
            for contract, mine in sorted(_by_contract(held).items()):
                # locked first, in order (an UPDATE alone locks in whatever order it scans)
                ours = [row.partition for row in _locked(conn, contract, sorted(mine))
                        if _still_held(mine[row.partition], row, now)]
                for page in _pages(conn, ours):
                    conn.execute(leases.update().where(leases.c.contract == contract, _among(conn, page))
                                 .values(expires_at=now))

    def lease(self, contract: str, partition: str) -> Lease | None:
        """The target's lease as it is now (live or not); None when it never had one."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(leases).where(leases.c.contract == contract,
                                                       leases.c.partition == partition)).first()
        return lease_of(row) if row is not None and row.token else None

    def fenced(self: _Store, held: Iterable[Lease]) -> _Store:
        """This store, committing only for the targets of ``held`` and only while they are held (the
        same engine; the leases' expiry is read from the database at each commit)."""
        view = copy.copy(self)
        view.fence = {lease.key: lease for lease in held}
        return view


def check_fence(conn: Connection, store: Connected, keys: Iterable[tuple[str, str]]) -> None:
    """In the caller's transaction: ``LeaseLost`` unless ``store`` holds every target of ``keys`` (nothing to
    check for an unfenced store). On PostgreSQL the lease rows stay share-locked until the commit, so no
    take-over can slip in between this check and the commit."""
    fence = store.fence
    wanted = set(keys)
    if fence is None or not wanted:
        return
    now = store.clock()
    lost: list[LostLease] = []
    for contract in sorted({c for c, _ in wanted}):
        partitions = sorted(p for c, p in wanted if c == contract)
        current = {lease.partition: lease for lease in _locked(conn, contract, partitions, share=True)}
        for partition in partitions:
            mine, row = fence.get((contract, partition)), current.get(partition)
            if mine is None or not _still_held(mine, row, now):
                lost.append(LostLease(contract, partition, mine.holder if mine else "", mine, row))
    if lost:
        raise LeaseLost(lost)


def _still_held(mine: Lease, row: Lease | None, now: dt.datetime) -> bool:
    return row is not None and row.token == mine.token and row.holder == mine.holder and row.live(now)


def _locked(conn: Connection, contract: str, partitions: Sequence[str], *, share: bool = False) -> Iterator[Lease]:
    """The lease rows of ``partitions`` (sorted), locked on PostgreSQL in that order (``share``: FOR SHARE)."""
    for page in _pages(conn, partitions):
        query = (sa.select(leases).where(leases.c.contract == contract, _among(conn, page))
                 .order_by(leases.c.partition))
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(read=share)
        for row in conn.execute(query):
            yield lease_of(row)


def _insert_missing(conn: Connection, contract: str, partitions: Sequence[str], now: dt.datetime) -> None:
    """A free row (token 0, expired) for every target that never had a lease: then every take locks rows."""
    for page in _pages(conn, partitions):
        found = set(conn.execute(sa.select(leases.c.partition).where(
            leases.c.contract == contract, _among(conn, page))).scalars())
        missing = [p for p in page if p not in found]
        if not missing:
            continue
        insert = (sa.dialects.postgresql.insert(leases) if conn.dialect.name == "postgresql"
                  else sa.dialects.sqlite.insert(leases))
        # a row another transaction has just inserted looks missing here too: this insert waits for it
        conn.execute(insert.on_conflict_do_nothing(), [
            {"contract": contract, "partition": p, "holder": "", "token": 0, "taken_at": now, "expires_at": now}
            for p in missing])


def _by_contract(held: Sequence[Lease]) -> dict[str, dict[str, Lease]]:
    out: dict[str, dict[str, Lease]] = {}
    for lease in held:
        out.setdefault(lease.contract, {})[lease.partition] = lease
    return out


def _pages(conn: Connection, items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    size = PG_PAGE if conn.dialect.name == "postgresql" else SQLITE_PAGE
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _among(conn: Connection, page: Sequence[str]) -> Any:
    """``partition`` is one of ``page``: one array parameter on PostgreSQL, an IN list on SQLite."""
    if conn.dialect.name == "postgresql":
        return leases.c.partition == sa.any_(sa.bindparam(
            "partitions", list(page), type_=sa.dialects.postgresql.ARRAY(leases.c.partition.type)))
    return leases.c.partition.in_(list(page))
