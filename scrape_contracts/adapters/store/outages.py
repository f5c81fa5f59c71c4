"""A PostgreSQL project store that answered and then went away for a while (the server restarted, a network
cut between a worker host and the database): the work waits for it, for a bounded time, instead of failing.

``wait_out_outages(engine, ...)`` makes the engine's new connections retry a connection the server refused or
did not answer, until ``SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS`` (60 s) have passed, then fail with
``StoreGone`` saying where, for how long and what to do. With ``pool_pre_ping`` a pooled connection the
outage broke is found dead at its next checkout and replaced through the same wait, so a chunk of a batch
simply pauses while the database is gone and goes on where it was. The first connection of an engine fails at
once as before (a command pointed at a database that is not there says so now, not a minute later), except in
a batch's work (a chunk step opening the store, ``waiting_from_the_first``; its fetching and parsing
processes, ``as_the_run_does``), which may start just as the database goes away; a command waits for nothing
(``failing_at_once``), nor does a batch it runs.

``disconnects()`` counts the broken connections and the waits this process has seen, so that a holder of
other connections to the same server (Dagster's event log pool, ``defs/batch.py``) knows to renew them.
A login refused (a wrong password, no such database) is never waited for: it does not pass.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrape_contracts.adapters.store.errors import StoreGone

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_WAIT_S, LONGEST_WAIT_S = 0.25, 2.0  # between two tries: doubling from the first to the longest
_lock = threading.Lock()
_count = 0  # ``disconnects``
_at_once = [0]  # ``failing_at_once`` blocks open in this process
_from_the_first = threading.Event()  # ``as_the_run_does(True)`` in this process
_here = threading.local()  # ``waiting_from_the_first`` blocks open in this thread


@contextlib.contextmanager
def failing_at_once() -> Iterator[None]:
    """While in the block nothing in this process waits: a command (``scrape-contracts ...``, a batch it runs
    here included) says a database gone in one line at once, and is run again by whoever typed it."""
    with _lock:
        _at_once[0] += 1
    try:
        yield
    finally:
        with _lock:
            _at_once[0] -= 1


def waiting() -> bool:
    """Whether this process waits for a database gone (it is not in ``failing_at_once``): what the fetching
    and parsing processes of a batch it runs are told to do (``as_the_run_does``)."""
    return not _at_once[0]


def as_the_run_does(waits: bool) -> None:
    """In a batch's fetching or parsing process, for its whole life: wait for the database from an engine's
    first connection on, as the run that started it does (it may start just as the database goes away), or,
    for a command's batch, never wait."""
    if waits:
        _from_the_first.set()
    else:
        with _lock:
            _at_once[0] += 1


@contextlib.contextmanager
def waiting_from_the_first() -> Iterator[None]:
    """An engine's first connection waits too, in this thread while in the block: a store a step opens (a process that
    serves other work too, as a test's, says an absent database at once outside it)."""
    _here.depth = getattr(_here, "depth", 0) + 1
    try:
        yield
    finally:
        _here.depth -= 1


def _waits_from_the_first() -> bool:
    return _from_the_first.is_set() or getattr(_here, "depth", 0) > 0


def disconnects() -> int:
    """How many broken connections and waits for the database this process has seen (it only grows)."""
    return _count


def _seen() -> None:
    global _count
    with _lock:
        _count += 1


def server_of(engine: Engine) -> str:
    """``host:port`` of the engine's database, as a user reads it in an error."""
    url = engine.url
    return f"{url.host or 'localhost'}:{url.port or 5432}"


def passes_by(reason: str) -> bool:
    """Whether a failed connection's first line is one that ends by itself (refused, timed out, reset, the
    server starting or full), not a login or a database the server refused."""
    if "FATAL" not in reason:
        return True
    return any(words in reason for words in ("the database system is", "too many clients", "terminating connection"))


def wait_out_outages(engine: Engine, seconds: float, *, from_the_first: bool = False,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> Engine:
    """``engine`` (PostgreSQL), whose connections wait up to ``seconds`` for a server that went away;
    ``from_the_first``: its very first connection waits too (an engine made only inside running work)."""
    where = server_of(engine)
    connected = threading.Event()
    if from_the_first:
        connected.set()

    @sa.event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        if _at_once[0] or (not connected.is_set() and not _waits_from_the_first()):
            made = dialect.connect(*cargs, **cparams)
            connected.set()
            return made
        return _waiting(dialect, cargs, cparams, where, seconds, sleep, clock)

    @sa.event.listens_for(engine, "handle_error")
    def _broken(context: Any) -> None:
        if context.is_disconnect:
            _seen()

    return engine


def _waiting(dialect: Any, cargs: Any, cparams: Any, where: str, seconds: float,
             sleep: Callable[[float], None], clock: Callable[[], float]) -> Any:
    started: float | None = None
    pause = FIRST_WAIT_S
    while True:
        try:
            made = dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.OperationalError as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if not passes_by(reason):
                raise
            now = clock()
            if started is None:
                started = now
                _seen()
                log.warning("the project store at %s does not answer (%s): waiting for it up to %.0f s "
                            "(SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS)", where, reason, seconds)
            if now - started >= seconds:
                raise StoreGone(
                    f"the project store at {where} was unreachable for {seconds:.0f} s: {reason}; run it again "
                    "once the database answers (what was recorded is kept; SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS "
                    "waits longer)") from exc
            sleep(min(pause, max(0.0, started + seconds - now)))
            pause = min(pause * 2, LONGEST_WAIT_S)
            continue
        if started is not None:
            log.warning("the project store at %s answers again after %.1f s", where, clock() - started)
        return made


def again_if_broken(work: Callable[[], T]) -> T:
    """``work()``, once more when a connection the database's going away broke failed it mid-statement (the
    next one waits for the database, as above). Only for work that may be done twice: a page stored again, a
    slot taken again (the first one, if it was taken, expires by itself)."""
    try:
        return work()
    except sa.exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        return work()
