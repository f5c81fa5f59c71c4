"""A database that does not answer is one line naming it, on the project store's and Dagster's paths alike."""

from __future__ import annotations

import socket

import pytest
import sqlalchemy as sa

from scrape_contracts.adapters.store import ProjectStore, StoreError, StoreUnavailable, unreachable


def _closed_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_opening_a_store_on_an_unreachable_postgresql_is_one_line_naming_it() -> None:
    url = f"postgresql://postgres:hunter2@127.0.0.1:{_closed_port()}/scrape"
    with pytest.raises(StoreUnavailable) as refused:
        ProjectStore(url)
    message = str(refused.value)
    assert isinstance(refused.value, StoreError)  # what the CLI prints as "error: ..." without a traceback
    assert "\n" not in message and "hunter2" not in message
    assert message.startswith("cannot reach the database at postgresql://postgres:***@127.0.0.1:")
    assert "Connection refused" in message and "SCRAPE_CONTRACTS_DB_URL" in message


def test_a_connection_failure_is_recognised_through_dagster_postgres_and_nothing_else_is() -> None:
    from dagster_postgres.utils import DagsterPostgresException

    engine = sa.create_engine(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x")
    try:
        with pytest.raises(sa.exc.OperationalError) as caught:
            engine.connect()
    finally:
        engine.dispose()
    # what dagster_postgres raises after its retries (the traceback `run --wait` printed), from the real one
    try:
        raise DagsterPostgresException("too many retries for DB connection") from caught.value
    except DagsterPostgresException as wrapped:
        reason = unreachable(wrapped)
    assert reason is not None and "Connection refused" in reason and "\n" not in reason
    assert unreachable(ValueError("a bug")) is None
    with pytest.raises(sa.exc.OperationalError) as sqlite_error:  # a SQLite error is not "unreachable"
        sa.create_engine("sqlite://").connect().execute(sa.text("SELECT * FROM nowhere"))
    assert unreachable(sqlite_error.value) is None
