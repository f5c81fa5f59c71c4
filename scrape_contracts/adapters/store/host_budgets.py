"""Each site host's budget shared by every fetching process on one PostgreSQL project store.

A batched run split into chunk steps fetches from several processes, on several worker hosts; each has its
own pacer (adapters/fetch/pace.py: adaptive window, Retry-After, Crawl-delay), which knows only its own
requests. ``HostBudgets`` bounds the total: before a request starts, its process takes one of the host's
``fetch.concurrency`` slots here (and, with ``fetch.rate``, the host's next start time), and gives it back
when the request ends.

Why a table of slots with expiring holders rather than session advisory locks: an advisory lock is released
only when its session ends, and a frozen process (SIGSTOP, a host cut off but not gone) keeps its session
open, so its slots would stall every other worker for as long as it is frozen. A slot here expires after
``hold_s`` (the contract's wall-clock deadline for one page, no request of the holder outlives it, plus the
time the pacer may hand the slot from request to request: adapters/fetch/shared_slots.py), so a frozen or
killed holder delays the others by at most that. From the site's side nothing is lost: a request of a
frozen holder is over at the server long before its slot expires.

The rate: one ``UPDATE ... SET next_at = greatest(next_at, now()) + interval RETURNING`` per request, atomic
on the row, gives each request its own start time ``interval`` after the one before, whichever process asked.
Every call is one short autocommit statement on a connection of this process's own; the pacer calls from a
single thread, so the asyncio loop never waits on the database.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from scrape_contracts import settings
from scrape_contracts.adapters.schema import host_rates, host_slots
from scrape_contracts.adapters.store.outages import again_if_broken, wait_out_outages

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _fast_commits(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("SET synchronous_commit = off")
    cursor.close()
    dbapi_conn.commit()  # outside any transaction, as the pool hands connections out


def budgets_url_for(store: sa.Engine) -> str | None:
    """The URL (password included) of a project store that keeps shared host budgets: PostgreSQL, reached by
    every machine; None for SQLite (one machine, where a run's own pacer already sees all its requests)."""
    url = store.url
    return url.render_as_string(hide_password=False) if url.get_backend_name() == "postgresql" else None


def budgets_for(store: sa.Engine) -> HostBudgets | None:
    """``HostBudgets`` on ``store`` when it keeps them (``budgets_url_for``), else None."""
    url = budgets_url_for(store)
    return HostBudgets(url) if url is not None else None


class HostBudgets:
    """``take(host, slots, hold_s)`` → a slot number or None (all held); ``give_back``; ``next_start``."""

    def __init__(self, url: str, outage_seconds: float | None = None) -> None:
        # made only inside running work (a batch's fetching process, a single-target step): even its first
        # connection waits for a database gone for a while, and one the outage broke is found dead before use
        # (the requests wait for their slots meanwhile); a command's own still fails at once (outages.py)
        engine = sa.create_engine(url, poolclass=sa.pool.StaticPool, isolation_level="AUTOCOMMIT",
                                  pool_pre_ping=True, connect_args={"connect_timeout": 10})
        # A slot is a lease of a second or two that expires by itself: its row need not reach the disk before
        # the request goes. A server crash forgets at most the last half second of takes and give-backs, while
        # every request in flight fails with the crash anyway; an fsync per take was a round trip's worth of
        # waiting per page on a busy disk. Listening before anything connects: the pool keeps one connection.
        sa.event.listen(engine, "connect", _fast_commits)
        self.engine = wait_out_outages(
            engine, settings.db_outage_seconds() if outage_seconds is None else outage_seconds, from_the_first=True)
        self._me = uuid.uuid4().hex[:12]
        self._turn = itertools.count()
        self._known: set[tuple[str, int]] = set()  # hosts whose slot rows exist (at this many slots)
        self._holders: dict[tuple[str, int], str] = {}

    def take(self, host: str, slots: int, hold_s: float) -> int | None:
        return again_if_broken(lambda: self._take(host, slots, hold_s))

    def _take(self, host: str, slots: int, hold_s: float) -> int | None:
        with self.engine.connect() as conn:
            if (host, slots) not in self._known:
                conn.execute(pg_insert(host_slots).values(
                    [{"host": host, "slot": s, "holder": "", "expires_at": _EPOCH} for s in range(slots)]
                ).on_conflict_do_nothing())
                self._known.add((host, slots))
            holder = f"{self._me}:{next(self._turn)}"
            free = (sa.select(host_slots.c.slot)
                    .where(host_slots.c.host == host, host_slots.c.slot < slots,
                           host_slots.c.expires_at <= sa.func.now())
                    .order_by(host_slots.c.slot).limit(1).with_for_update(skip_locked=True).scalar_subquery())
            slot = conn.execute(
                host_slots.update()
                .where(host_slots.c.host == host, host_slots.c.slot == free)
                .values(holder=holder, expires_at=sa.func.now() + sa.func.make_interval(0, 0, 0, 0, 0, 0, hold_s))
                .returning(host_slots.c.slot)).scalar()
        if slot is not None:
            self._holders[(host, slot)] = holder
        return slot

    def give_back(self, host: str, slot: int) -> None:
        holder = self._holders.pop((host, slot), None)
        if holder is None:
            return

        def give() -> None:
            with self.engine.connect() as conn:  # only while still ours: an expired slot may be another's now
                conn.execute(host_slots.update().where(host_slots.c.host == host, host_slots.c.slot == slot,
                                                       host_slots.c.holder == holder)
                             .values(expires_at=sa.func.now()))

        again_if_broken(give)

    def next_start(self, host: str, interval_s: float) -> float:
        """Seconds to wait before this request may start so that the host's starts are ``interval_s`` apart
        over every process (0: now)."""
        step = sa.func.make_interval(0, 0, 0, 0, 0, 0, interval_s)

        def book() -> float:
            with self.engine.connect() as conn:
                conn.execute(pg_insert(host_rates).values(host=host, next_at=_EPOCH)
                             .on_conflict_do_nothing())
                start = sa.func.greatest(host_rates.c.next_at, sa.func.now())
                wait = conn.execute(
                    host_rates.update().where(host_rates.c.host == host).values(next_at=start + step)
                    .returning(sa.extract("epoch", host_rates.c.next_at - step - sa.func.now()))).scalar()
            return max(0.0, float(wait or 0.0))

        return again_if_broken(book)

    def close(self) -> None:
        self.engine.dispose()
