"""Schema migrations of the project store, on a real SQLite file and a real PostgreSQL database.

A store made by the previous release (built here from that release's DDL, ``_old_store``) is upgraded in
place when it is opened, its data intact and usable through the store's API; processes opening one store
together all succeed and the upgrade happens once; a fresh store gets the newest revision; a store newer
than the code is refused in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from scrape_contracts import cli
from scrape_contracts.adapters import migrations
from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.schema import metadata
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, Decision, SelectorSource
from scrape_contracts.adapters.store import (
    REVIEW_PAUSE, CandidateAction, NewCandidate, ProjectStore, StoreTooNew, new_engine,
)
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts_tests.adapters import _old_store

REPO_ROOT = Path(__file__).resolve().parents[2]
RACERS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        yield request.getfixturevalue("pg_database")
        return
    url = f"sqlite:///{tmp_path / 'store.db'}"
    yield url
    engine = store_module._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


@pytest.fixture
def old_store(store_url: str) -> Iterator[tuple[str, dict[str, list[tuple]]]]:
    """A store of the previous release with data in it, and a dump of every row."""
    engine = sa.create_engine(store_url)
    try:
        _old_store.create_old_store(engine)
        _old_store.seed(engine)
        rows = _old_store.dump(engine)
    finally:
        engine.dispose()
    yield store_url, rows


def _revisions(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.text(f"SELECT version_num FROM {migrations.VERSION_TABLE}")
            return list(conn.execute(query).scalars())
    finally:
        engine.dispose()


def test_head_names_the_newest_migration() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrations._config(None))
    assert script.get_heads() == [migrations.HEAD]
    # one line of revisions from the previous release's schema to HEAD
    assert [s.revision for s in script.walk_revisions()][-1] == migrations.PREVIOUS_RELEASE


def test_fresh_store_gets_head_and_matches_the_code(store_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = ProjectStore(store_url)
    assert _revisions(store_url) == [migrations.HEAD]
    with store.engine.connect() as conn:
        # the migrated schema is the one the code queries: no table, column, index or type differs
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE,
                                                         "include_name": migrations.ours})
        assert compare_metadata(context, metadata) == []
    # the status columns refuse values outside their enum
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO sc_candidates (contract, partition, run_id, url, record, outcome, status, details, "
            "created_at) VALUES ('c', 'p', 'r', 'u', '{}', 'valid', 'bogus', '{}', CURRENT_TIMESTAMP)"))


def test_store_of_previous_release_upgrades_in_place(old_store: tuple[str, dict[str, list[tuple]]]) -> None:
    url, before = old_store
    assert migrations.state(new_engine(url)).revision is None  # no version table: made before migrations

    store = ProjectStore(url)

    assert _revisions(url) == [migrations.HEAD]
    assert _old_store.dump(store.engine) == before  # every row of every table, unchanged
    # readable through the store, statuses as enums
    latest = store.latest_accepted("books", "p1")
    assert (latest.version, latest.record, latest.source) == (2, {"title": "Dune", "price": 110.0},
                                                              AcceptSource.SCRAPE)
    assert [v.version for v in store.accepted_history("books", "p1")] == [1, 2]
    assert {v.partition: v.version for v in store.latest_accepted_all("books")} == {"p1": 2, "p2": 1}
    waiting = store.pending_review("books", "p1")
    assert (waiting.id, waiting.status, waiting.outcome) == (3, CandidateStatus.QUARANTINED,
                                                            Outcome.REVIEW_REQUIRED)
    assert [c.status for c in store.candidates_of_run("r4")] == [CandidateStatus.UNCHANGED]
    history = store.selector_history("books")
    assert [(v.version, v.source, v.selectors) for v in history] == [
        (1, SelectorSource.CONTRACT, _old_store.BASE), (2, SelectorSource.HEAL, _old_store.HEALED)]
    assert store.current_selectors("books", _old_store.BASE).version == 2  # the heal stays in force
    state = store.state("books", "p1")
    assert state.paused and state.pause_reason == _old_store.PAUSE and state.etag == '"p1v2"'
    assert store.states("books")["p2"].heal_attempts == 1
    assert store.list_targets("books") == {"p1": "http://shop.test/p1", "p2": "http://shop.test/p2"}
    assert store.accepted_basis("books", ["p1"]) == {"p1": (2, "fp-old")}

    # and usable: the old quarantine is reviewed, a new chunk is recorded in bulk
    review = store.decide("books", "p1", "accept", reviewer="bob", reason="the price did change")
    assert (review.decision, review.accepted_version) == (Decision.ACCEPT, 3)
    assert not store.state("books", "p1").paused
    recorded = store.record_candidates([
        NewCandidate("books", p, "r9", f"http://shop.test/{p}", {"title": "X", "price": 1.0}, Outcome.VALID,
                     {"violations": []}, None, 2, CandidateAction.ACCEPT, compared_with=newest)
        for p, newest in (("p1", 3), ("p2", 1))])
    assert [(r.status, r.accepted_version) for r in recorded] == [(CandidateStatus.ACCEPTED, 4),
                                                                 (CandidateStatus.ACCEPTED, 2)]
    assert min(r.candidate_id for r in recorded) > len(_old_store.CANDIDATES)  # ids go on from the old rows


def _start_racers(url: str) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-m", "scrape_contracts_tests.adapters._old_store", url],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(RACERS)]


def _first_lines(racers: list[subprocess.Popen]) -> list[dict]:
    lines = []
    for racer in racers:
        line = racer.stdout.readline()
        assert line, racer.stderr.read()
        lines.append(json.loads(line))
    return lines


def _hold_schema_lock(url: str) -> tuple[sa.Engine, sa.Connection]:
    """Take the lock the upgrade takes (as an earlier release's process would), so the racers queue on it."""
    engine = sa.create_engine(url)
    conn = engine.connect()
    if engine.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": migrations.LOCK_KEY})
        conn.commit()
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # SQLite's write lock
    return engine, conn


def _waiting_on_advisory_lock(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).scalar()
    finally:
        engine.dispose()


def test_processes_upgrading_at_once_all_succeed(old_store: tuple[str, dict[str, list[tuple]]]) -> None:
    url, before = old_store
    engine, lock = _hold_schema_lock(url)
    racers = _start_racers(url)
    try:
        # every racer found the store behind before any upgrade could start: they all go for the upgrade
        assert [line["seen"] for line in _first_lines(racers)] == [None] * RACERS
        if engine.dialect.name == "postgresql":
            deadline = time.monotonic() + 60
            while _waiting_on_advisory_lock(url) < RACERS:  # all of them queue on the lock
                assert time.monotonic() < deadline, "the racers never reached the schema lock"
                time.sleep(0.05)
        else:
            time.sleep(1.0)  # SQLite cannot list who waits for its lock: give them time to get there
    finally:
        lock.rollback() if engine.dialect.name == "sqlite" else lock.execute(
            sa.text("SELECT pg_advisory_unlock(:key)"), {"key": migrations.LOCK_KEY})
        lock.close()
        engine.dispose()
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"opened": migrations.HEAD}
    assert _revisions(url) == [migrations.HEAD]  # upgraded once, one version row
    upgraded = new_engine(url)
    try:
        assert _old_store.dump(upgraded) == before
    finally:
        upgraded.dispose()


def test_fresh_store_opened_by_racing_processes(store_url: str) -> None:
    racers = _start_racers(store_url)
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"opened": migrations.HEAD}
    assert _revisions(store_url) == [migrations.HEAD]


def test_store_newer_than_the_code_is_refused_in_one_line(store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    engine = new_engine(store_url)
    try:
        migrations.upgrade(engine, store_url)
        with engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '0999'"))
    finally:
        engine.dispose()
    with pytest.raises(StoreTooNew) as refused:
        ProjectStore(store_url)
    message = str(refused.value)
    assert "\n" not in message and "0999" in message and "pip install -U scrape_contracts" in message

    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", store_url)
    assert cli.main(["db", "upgrade"]) == 1
    assert capsys.readouterr().err.strip() == f"error: {message}"
    assert cli.main(["db", "current"]) == 0
    assert "0999, newer than this release knows" in capsys.readouterr().out


def test_db_commands(old_store: tuple[str, dict[str, list[tuple]]], monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    url, before = old_store
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", url)
    assert cli.main(["db", "current"]) == 0
    assert "made before migrations" in capsys.readouterr().out
    assert _revisions_or_none(url) is None  # `current` changes nothing

    assert cli.main(["db", "upgrade"]) == 0
    assert f"from {migrations.PREVIOUS_RELEASE} to {migrations.HEAD}" in capsys.readouterr().out
    assert cli.main(["db", "upgrade"]) == 0
    assert f"already at schema revision {migrations.HEAD}" in capsys.readouterr().out
    assert cli.main(["db", "current"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"schema revision {migrations.HEAD} (head)")


def _revisions_or_none(url: str) -> list[str] | None:
    try:
        return _revisions(url)
    except sa.exc.DBAPIError:
        return None


def test_open_at_head_is_one_query_without_alembic(store_url: str) -> None:
    ProjectStore(store_url)
    probe = (
        "import json, sys\n"
        "import sqlalchemy as sa\n"
        "seen = []\n"
        "sa.event.listen(sa.engine.Engine, 'before_cursor_execute', lambda *a: seen.append(a[2]))\n"
        "from scrape_contracts.adapters.store import ProjectStore\n"
        "ProjectStore(sys.argv[1])\n"
        "print(json.dumps({'statements': seen, 'alembic': 'alembic' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, store_url], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    queries = [s for s in report["statements"] if not s.startswith(("BEGIN", "select pg_catalog.version",
                                                                   "select current_schema", "show "))]
    assert queries == [f"SELECT version_num FROM {migrations.VERSION_TABLE}"], report["statements"]
    assert report["alembic"] is False


def test_review_pause_prefix_is_still_recognised_after_upgrade(old_store: tuple[str, dict]) -> None:
    # a store paused for review by the previous release is released by a review made after the upgrade
    url, _ = old_store
    store = ProjectStore(url)
    assert store.state("books", "p1").pause_reason.startswith(REVIEW_PAUSE)
    store.decide("books", "p1", "reject", reviewer="bob", reason="not a real price")
    assert not store.state("books", "p1").paused
    assert store.candidate(3).status == CandidateStatus.REJECTED


def _intermediate_store(url: str, revision: str, *, drop: tuple[str, ...] = (), unset_last_success: bool = False
                        ) -> None:
    """A store as an intermediate commit left it: migrated to ``revision`` of this chain, without what that
    commit's order had not run (``drop``: tables; ``unset_last_success``: 0005's column), stamped ``revision``."""
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            config = Config()
            config.set_main_option("script_location", str(migrations.HERE))
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            for table in drop:
                conn.execute(sa.text(f"DROP TABLE {table}"))
            if unset_last_success:
                conn.execute(sa.text("ALTER TABLE sc_partition_state DROP COLUMN last_success_at"))
    finally:
        engine.dispose()


def _schema_differences(store: ProjectStore) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE,
                                                         "include_name": migrations.ours})
        return compare_metadata(context, metadata)


def test_a_store_of_an_intermediate_commit_is_repaired_not_called_current(store_url: str) -> None:
    # the front door's commit ran 0001-0004 then its 0007: "0007", no sc_fingerprints, no last_success_at
    _intermediate_store(store_url, "0007", drop=("sc_fingerprints",), unset_last_success=True)
    store = ProjectStore(store_url)
    assert _revisions(store_url) == [migrations.HEAD]
    assert _schema_differences(store) == []
    with store.engine.begin() as conn:  # what retention reads (it crashed with UndefinedTable)
        assert conn.execute(sa.text("SELECT count(*) FROM sc_fingerprints")).scalar() == 0
        # the repair again, on a store that needs none: nothing changes, nothing fails
        # (from the revision before the repair: the ones after 0007 ran already)
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '0008_target_leases'"))
        # what the revisions after 0009 make, as a store at 0008 has not got it yet (they run again below)
        conn.execute(sa.text("DROP TABLE sc_pages"))
        conn.execute(sa.text("DROP TABLE sc_provider_jobs"))
        conn.execute(sa.text("DROP TABLE sc_host_slots"))
        conn.execute(sa.text("DROP TABLE sc_host_rates"))
        conn.execute(sa.text("DROP TABLE sc_repair_proposals"))
        conn.execute(sa.text("DROP TABLE sc_discovery_pages"))
        conn.execute(sa.text("DROP TABLE sc_proxy_health"))
    store_module._engines.pop(store_url, None)
    assert migrations.upgrade(new_engine(store_url), store_url) == ("0008_target_leases", migrations.HEAD)
    assert _schema_differences(ProjectStore(store_url)) == []


def test_a_store_at_a_renumbered_revision_id_is_upgraded_from_what_it_holds(store_url: str) -> None:
    # the freshness commit called last_success "0008" (merged as 0005): not a newer release's store
    _intermediate_store(store_url, "0005")
    engine = new_engine(store_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '0008'"))
    assert migrations.state(engine).known
    engine.dispose()
    store = ProjectStore(store_url)
    assert _revisions(store_url) == [migrations.HEAD] and _schema_differences(store) == []
