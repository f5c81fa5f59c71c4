"""Engines: one connection pool per store URL per process, the SQLite settings, the schema check at open."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from scrape_contracts import settings
from scrape_contracts.adapters import migrations
from scrape_contracts.adapters.store.errors import StoreTooNew, unavailable
from scrape_contracts.adapters.store.outages import again_if_broken, wait_out_outages
from scrape_contracts.adapters.store.rows import Lease, utc_now

# one engine per store URL in this process, opened once (the package's existing_store asks it)
open_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def _engine_for(url: str) -> Engine:
    # one pool per URL per process: runs, sensors and the CLI share it
    with _engines_lock:
        engine = open_engines.get(url)
        if engine is None:
            engine = new_engine(url)
            try:
                # a new connection the database's going away broke before its first statement was done is
                # one to make again (it then waits, as the run does): a batch's parse workers, opening their
                # store just as it went away, died of it
                again_if_broken(lambda: migrations.ensure_current(engine, shown_url(url)))
            except migrations.NewerSchema as exc:
                engine.dispose()
                raise StoreTooNew(str(exc)) from None
            except Exception as exc:
                engine.dispose()
                down = unavailable(exc, shown_url(url))
                if down is None:
                    raise
                raise down from None
            open_engines[url] = engine
        return engine


# A client frozen inside a transaction (a stopped process, a paused VM) held its row locks until it woke: a
# worker taking its expired leases over (SELECT ... FOR UPDATE) waited for it with no end, and the sweep with
# it (benchmarks/multihost.py --faults, docs/multihost.md). The server ends a transaction whose client sent
# nothing for this long; well under the shortest derived lease (120 s), so the locks are gone before the
# leases run out. The store's transactions send their statements back to back: none idles anywhere near it.
IDLE_IN_TRANSACTION_S = 30


def durable_commits(cursor: Any) -> None:
    """The store's commits wait for the server's disk, whatever the URL or the database's defaults say.

    The URL is often the one Dagster's instance uses (docs/production.md), where ``synchronous_commit=off`` is
    the recommended trade for the event log's speed: a crash of the server may drop its last half second of
    run events. The store holds the accepted data, which the last accepted version must survive; a stricter
    setting (``remote_apply`` for a replica) is left as it is.
    """
    cursor.execute("SHOW synchronous_commit")
    if cursor.fetchone()[0] in ("off", "local"):
        cursor.execute("SET synchronous_commit = on")


def new_engine(url: str) -> Engine:
    """An engine with the store's connection settings, the schema left alone (``_engine_for`` checks it)."""
    if not url.startswith("sqlite"):
        parsed = sa.engine.make_url(url)
        options: dict[str, Any] = {}
        if parsed.get_driver_name() == "psycopg2":
            # an UPDATE of many rows (a chunk's partition states) as pages of 100 per round trip, not one
            # round trip per row: 1,940 unchanged targets cost 2,000 round trips per sweep before
            options["executemany_mode"] = "values_plus_batch"
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            # a server that drops packets rather than refusing: each try of a connection ends in 10 s, so the
            # wait for a database gone away (outages.py) keeps to its bound
            options["connect_args"] = {"connect_timeout": 10}
        engine = sa.create_engine(url, pool_pre_ping=True, **options)
        if parsed.get_backend_name() == "postgresql":
            wait_out_outages(engine, settings.db_outage_seconds())

            @sa.event.listens_for(engine, "connect")
            def _postgres_connect(dbapi_conn: Any, _record: Any) -> None:
                cursor = dbapi_conn.cursor()
                cursor.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_S * 1000}")
                durable_commits(cursor)
                cursor.close()
                dbapi_conn.commit()  # the SETs outside any transaction the pool hands out

        return engine
    engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let BEGIN below take effect
        dbapi_conn.execute("PRAGMA busy_timeout=60000")
        _enable_wal(dbapi_conn)
        # in WAL mode NORMAL syncs at checkpoints, not at every commit: a killed process still loses nothing
        # committed (the crash tests SIGKILL writers); only a power cut can drop the last commits. An fsync
        # per commit was a tenth of a batched run's own time on a busy disk (py-spy). PostgreSQL is unchanged.
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @sa.event.listens_for(engine, "begin")
    def _sqlite_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(migrations.READ_ONLY):
            conn.exec_driver_sql("BEGIN")  # the revision check at open: a read must not queue behind writers
            return
        # IMMEDIATE: take the write lock up front, so two writers queue instead of deadlocking (and the
        # migrations of processes opening one store take turns)
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def upgrade_schema(url: str) -> tuple[str | None, str]:
    """Bring the store's schema to the newest revision now: (revision before, after); see ``migrations``."""
    engine = new_engine(url)
    try:
        return migrations.upgrade(engine, shown_url(url))
    except migrations.NewerSchema as exc:
        raise StoreTooNew(str(exc)) from None
    finally:
        engine.dispose()


def schema_state(url: str) -> migrations.SchemaState:
    """Where the store's schema stands, changing nothing."""
    engine = new_engine(url)
    try:
        return migrations.state(engine)
    finally:
        engine.dispose()


def shown_url(url: str) -> str:
    """The URL as it may be printed: the password hidden."""
    return sa.engine.make_url(url).render_as_string(hide_password=True)


def _enable_wal(dbapi_conn: Any) -> None:
    # Switching a new file to WAL needs an exclusive lock, and when that would deadlock with another
    # connection (say one creating the tables) SQLite answers "database is locked" at once, without the busy
    # timeout: processes opening a fresh store together failed now and then. Retrying takes turns; the mode
    # is stored in the file, so once one connection has switched this is a plain read for the others.
    deadline = time.monotonic() + 60
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class Connected:
    """The store's engine and its transactions: what every part of ``ProjectStore`` builds on.

    ``clock``: what leases take as now (tests pass their own; UTC). ``fence``: the leases a store got from
    ``fenced`` commits under (None: an unfenced store, as the CLI, reviews and readers use).
    """

    def __init__(self, url: str, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.url = url
        self.engine = _engine_for(url)
        self.clock = clock or utc_now
        self.fence: dict[tuple[str, str], Lease] | None = None

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn
