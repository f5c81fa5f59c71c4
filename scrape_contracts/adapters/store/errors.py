"""What the project store refuses, each with a message that says why and what to do."""

from __future__ import annotations


class StoreError(Exception):
    """A request the store refuses; the message says why and what to do."""


class StoreTooNew(StoreError):
    """The store's schema was upgraded by a newer release of scrape_contracts than this one."""


class StoreUnavailable(StoreError):
    """The database cannot be reached (refused, timed out, gone mid-batch); one line, no traceback."""


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
