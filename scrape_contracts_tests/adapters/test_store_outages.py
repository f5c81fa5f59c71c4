"""A PostgreSQL project store that went away for a while (``adapters/store/outages.py``): its connections wait
for it and the work goes on; past the bound it is one line saying where, how long and what to do; Dagster's
held event-log pool is renewed after it. The database is reached through a relay (``testing/forward.py``),
which the tests end and start again: for the store, the database went away and came back."""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts.adapters.store import ProjectStore, StoreGone
from scrape_contracts.adapters.store.outages import disconnects, waiting_from_the_first
from scrape_contracts.defs.batch import hold_connections
from scrape_contracts.testing import forward, netns
from scrape_contracts_tests.api.servers import free_port

OUTAGES = "scrape_contracts.adapters.store.outages"


@dataclass
class Relayed:
    """``url``: the test's database as reached through a relay on ``port``; ``cut`` / ``restore`` it."""

    url: str
    port: int
    relay: subprocess.Popen

    def cut(self) -> None:
        self.relay.kill()
        self.relay.wait(10)

    def restore(self) -> None:
        self.relay = forward.start(f"127.0.0.1:{self.port}", "127.0.0.1:5432")


@pytest.fixture
def relayed(pg_database: str) -> Iterator[Relayed]:
    from scrape_contracts.adapters import store as store_module

    assert "@127.0.0.1:5432/" in pg_database
    port = free_port()
    made = Relayed(pg_database.replace("@127.0.0.1:5432/", f"@127.0.0.1:{port}/"), port,
                   forward.start(f"127.0.0.1:{port}", "127.0.0.1:5432"))
    try:
        yield made
    finally:
        made.cut()
        engine = store_module._engines.pop(made.url, None)
        if engine is not None:
            engine.dispose()


def test_a_store_that_went_away_waits_for_it_and_goes_on_once_it_answers(
        relayed: Relayed, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGES)
    store = ProjectStore(relayed.url)
    assert store.recorded_by_run("shop", "run-1", ["p1"]) == {}  # a pooled connection, broken by the cut
    before = disconnects()
    relayed.cut()
    found: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: found.update(rows=store.recorded_by_run("shop", "run-1", ["p1"])))
    reader.start()
    netns.wait_until("the store waiting for the database", lambda: "waiting for it" in caplog.text, 60)
    assert reader.is_alive() and not found  # it cannot have returned: nothing answers
    relayed.restore()
    reader.join(120)
    assert found == {"rows": {}}
    assert disconnects() > before  # what tells Dagster's held pool to renew itself (defs/batch.py)
    [waiting] = [r.getMessage() for r in caplog.records if "waiting for it" in r.getMessage()]
    assert waiting.startswith(f"the project store at 127.0.0.1:{relayed.port} does not answer (")
    assert "Connection refused" in waiting and "SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS" in waiting
    assert any("answers again after" in r.getMessage() for r in caplog.records)


def test_a_store_opened_for_a_batchs_work_waits_from_its_first_connection(
        relayed: Relayed, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=OUTAGES)
    relayed.cut()  # the database gone just as a chunk starts
    opened: dict[str, ProjectStore] = {}

    def open_for_a_chunk() -> None:
        with waiting_from_the_first():
            opened["store"] = ProjectStore(relayed.url)

    opener = threading.Thread(target=open_for_a_chunk)
    opener.start()
    netns.wait_until("the chunk's store waiting for the database", lambda: "waiting for it" in caplog.text, 60)
    relayed.restore()
    opener.join(120)
    assert opened["store"].recorded_by_run("shop", "run-1", ["p1"]) == {}


def test_a_store_whose_new_connection_breaks_as_it_is_set_up_waits_and_opens(
        relayed: Relayed, caplog: pytest.LogCaptureFixture) -> None:
    # a batch's parse workers opened their store just as the database went away: the connection each had just
    # made broke while the store set it up (before the schema check), and they died instead of waiting
    caplog.set_level(logging.WARNING, logger=OUTAGES)
    cut: list[int] = []

    def cut_as_it_connects(dbapi_conn: Any, _record: Any) -> None:
        if not cut and dbapi_conn.get_dsn_parameters().get("port") == str(relayed.port):
            cut.append(1)
            relayed.cut()  # the relay's end closes: the connection just made is dead under the store's SETs

    def restore_once_waiting() -> None:
        netns.wait_until("the store waiting for the database", lambda: "waiting for it" in caplog.text, 60)
        relayed.restore()

    restorer = threading.Thread(target=restore_once_waiting, daemon=True)
    sa.event.listen(sa.pool.Pool, "connect", cut_as_it_connects)
    try:
        restorer.start()
        with waiting_from_the_first():  # as a batch's worker process does (as_the_run_does)
            store = ProjectStore(relayed.url)
    finally:
        sa.event.remove(sa.pool.Pool, "connect", cut_as_it_connects)
    restorer.join(60)
    assert cut and store.recorded_by_run("shop", "run-1", ["p1"]) == {}


def test_a_store_gone_for_longer_than_the_bound_is_one_line_with_where_how_long_and_what_to_do(
        relayed: Relayed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS", "1")
    store = ProjectStore(relayed.url)
    store.recorded_by_run("shop", "run-1", ["p1"])
    relayed.cut()
    with pytest.raises(StoreGone) as gone:
        store.recorded_by_run("shop", "run-1", ["p1"])
    message = str(gone.value)
    assert message.startswith(f"the project store at 127.0.0.1:{relayed.port} was unreachable for 1 s: ")
    assert "Connection refused" in message and "\n" not in message
    assert "run it again once the database answers (what was recorded is kept" in message


def test_dagsters_held_event_log_pool_is_renewed_after_the_database_was_gone(
        relayed: Relayed, tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: {relayed.url!r}\ntelemetry:\n  enabled: false\n")
    store = ProjectStore(relayed.url)  # the tables; then a pooled connection of the store's
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        hold_connections(instance)
        instance.report_engine_event("before", run_id="outage-run", job_name="j")  # the held connection
        store.recorded_by_run("shop", "run-1", ["p1"])
        relayed.cut()
        relayed.restore()  # gone and back: both held connections are dead, neither pool knows yet
        store.recorded_by_run("shop", "run-1", ["p1"])  # the store's pings its own and sees the break
        hold_connections(instance)  # as each committed chunk of a batch does before its events
        instance.report_engine_event("after", run_id="outage-run", job_name="j")
        assert [e.message for e in instance.all_logs("outage-run")] == ["before", "after"]
    finally:
        instance.dispose()
