"""What the project store refuses, each with a message that says why and what to do."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from scrape_contracts.adapters.store.rows import Lease


class StoreError(Exception):
    """A request the store refuses; the message says why and what to do."""


class StoreTooNew(StoreError):
    """The store's schema was upgraded by a newer release of scrape_contracts than this one."""


class StoreUnavailable(StoreError):
    """The database cannot be reached (refused, timed out, gone mid-batch); one line, no traceback."""


class StoreGone(StoreUnavailable):
    """The database went away and did not answer again within SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS."""


# database drivers whose connection failures these are (sqlalchemy wraps them, dagster_postgres wraps that)
_DRIVERS = frozenset({"psycopg2", "psycopg", "asyncpg", "pg8000"})


def unreachable(exc: BaseException) -> str | None:
    """The driver's first line when ``exc`` (or anything in its chain of causes) is a PostgreSQL connection
    that failed or broke; None for any other error (a constraint, a syntax error: those are bugs or refusals).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        if kind.__module__.split(".")[0] in _DRIVERS and kind.__name__ in ("OperationalError", "InterfaceError"):
            text = str(current).strip()
            return text.splitlines()[0] if text else kind.__name__
        current = current.__cause__ or current.__context__ or getattr(current, "orig", None)
    return None


def unavailable(exc: BaseException, where: str) -> StoreUnavailable | None:
    """``StoreUnavailable`` naming ``where`` (a URL without its password) when ``exc`` is ``unreachable``."""
    reason = unreachable(exc)
    if reason is None:
        return None
    return StoreUnavailable(f"cannot reach the database at {where}: {reason} (is PostgreSQL running and "
                            "reachable from here? check SCRAPE_CONTRACTS_DB_URL, or dagster.yaml for Dagster's)")


class StoreNotFound(StoreError):
    """No project store at the URL: nothing was scraped with it (opening it would create an empty one)."""


class NothingToReview(StoreError):
    pass


class Superseded(StoreError):
    pass


class AlreadyAccepted(StoreError):
    pass


class StaleCandidate(StoreError):
    """The candidate was compared with an accepted version that is no longer the newest: decide again."""

    def __init__(self, message: str, newest: int) -> None:
        super().__init__(message)
        self.newest = newest


class SelectorConflict(StoreError):
    """Another run added a selector version first: reload and retry."""


def shown_time(at: dt.datetime) -> str:
    return f"{at.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


class TargetBusy(StoreError):
    """Another holder's lease on the target is live: the target is being scraped elsewhere."""

    def __init__(self, held: Lease) -> None:
        self.held = held
        super().__init__(busy_message(held))


def busy_message(held: Lease) -> str:
    """What a user reads about a target another run holds (docs/leases.md)."""
    return (f"busy: target {held.contract}/{held.partition} is being scraped by run {held.holder} until "
            f"{shown_time(held.expires_at)}; nothing was scraped for it here. It is free again as soon as that "
            "run ends, or when its lease expires")


@dataclass(frozen=True)
class LostLease:
    """A lease ``holder`` no longer has: ``mine`` the one it had (None: not known here), ``current`` the
    target's lease now (None: the target never had one)."""

    contract: str
    partition: str
    holder: str
    mine: Lease | None
    current: Lease | None

    @property
    def key(self) -> tuple[str, str]:
        return self.contract, self.partition

    @property
    def message(self) -> str:
        mine, now = self.mine, self.current
        where = f"target {self.contract}/{self.partition}"
        if now is None or not now.token or not self.holder:
            what = f"this run holds no lease on {where}"
        elif now.holder != self.holder or (mine is not None and now.token != mine.token):
            what = f"run {now.holder} took {where} over at {shown_time(now.taken_at)}, after this run's lease expired"
        else:
            what = (f"this run's lease on {where} expired at {shown_time(now.expires_at)} (the run was paused or "
                    "stalled for longer than the lease, SCRAPE_CONTRACTS_LEASE_SECONDS)")
        return f"lease lost: {what}; nothing this run found for it was recorded"


class LeaseLost(StoreError):
    """A commit (or renewal) by a holder whose lease expired or was taken over: nothing was written."""

    def __init__(self, lost: Sequence[LostLease]) -> None:
        self.lost = tuple(lost)
        more = f" (and {len(self.lost) - 1} other target(s))" if len(self.lost) > 1 else ""
        super().__init__(self.lost[0].message + more)

    @property
    def keys(self) -> set[tuple[str, str]]:
        return {item.key for item in self.lost}
