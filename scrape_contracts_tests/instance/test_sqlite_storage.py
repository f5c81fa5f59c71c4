"""The laptop instance's event log (scrape_contracts/sqlite_instance.py) stores what Dagster's own stores, faster."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from scrape_contracts.instance.sqlite_storage import PooledSqliteEventLogStorage, ScrapeSqliteStorage

REPO = Path(__file__).resolve().parents[2]
KEY = dg.AssetKey(["scrape", "shop"])


def _materialisations(run_id: str, count: int, start: int = 0) -> list[EventLogEntry]:
    entries = []
    for i in range(start, start + count):
        materialisation = dg.AssetMaterialization(asset_key=KEY, partition=f"p{i:04d}", metadata={"version": i})
        event = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name="job",
                             event_specific_data=StepMaterializationData(materialisation))
        entries.append(EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id,
                                     timestamp=time.time(), dagster_event=event, job_name="job"))
    return entries


def _stored(storage: SqliteEventLogStorage, run_id: str) -> tuple[list[tuple[str, int]], list[str], str | None]:
    """What a reader sees: the run's events, the asset's partitions, and its latest materialisation."""
    run_events = [(r.event_log_entry.dagster_event.partition,  # type: ignore[union-attr]
                   r.event_log_entry.asset_materialization.metadata["version"].value)  # type: ignore[union-attr]
                  for r in storage.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records]
    partitions = sorted(storage.get_materialized_partitions(KEY))
    latest = storage.get_latest_materialization_events([KEY])[KEY]
    return run_events, partitions, latest.asset_materialization.partition if latest else None  # type: ignore[union-attr]


def test_a_block_of_materialisations_reads_back_as_dagster_stores_it(tmp_path: Path) -> None:
    ours, theirs = PooledSqliteEventLogStorage(str(tmp_path / "ours")), SqliteEventLogStorage(str(tmp_path / "theirs"))
    for storage in (ours, theirs):
        storage.store_event_batch(_materialisations("run-1", 150))
        storage.store_event_batch(_materialisations("run-1", 50, start=150))
    assert _stored(ours, "run-1") == _stored(theirs, "run-1")
    events, partitions, latest = _stored(ours, "run-1")
    assert len(events) == 200 and events[0] == ("p0000", 0) and events[-1] == ("p0199", 199)
    assert len(partitions) == 200 and latest == "p0199"
    # the asset's latest materialisation per partition is the event's own
    record = ours.get_latest_storage_id_by_partition(KEY, DagsterEventType.ASSET_MATERIALIZATION, {"p0123"})
    assert set(record) == {"p0123"}


def test_a_block_is_much_cheaper_than_dagsters_event_by_event(tmp_path: Path) -> None:
    def per_event(storage: SqliteEventLogStorage) -> float:
        storage.store_event(_materialisations("warm", 1)[0])
        entries = _materialisations("run-1", 200)
        started = time.perf_counter()
        storage.store_event_batch(entries)
        return (time.perf_counter() - started) / len(entries)

    theirs = per_event(SqliteEventLogStorage(str(tmp_path / "theirs")))
    ours = per_event(PooledSqliteEventLogStorage(str(tmp_path / "ours")))
    # measured 0.17 vs 7.2 ms per event; the margin absorbs a loaded machine
    assert ours * 4 < theirs, (ours, theirs)


def test_a_new_runs_file_is_a_copy_of_a_template_that_dagster_reads_as_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's ``.db`` is copied from an empty one made once, not built: Dagster's own storage (and its
    Alembic check) must take the copy, and the template must not pass for a run."""
    import glob
    import sqlalchemy as sa
    from dagster._core.storage.sql import check_alembic_revision, get_alembic_config
    from dagster._core.storage.event_log.sqlite import sqlite_event_log

    ours = PooledSqliteEventLogStorage(str(tmp_path))
    ours.store_event_batch(_materialisations("run-1", 3))  # makes the template, then the copy
    built = []
    monkeypatch.setattr(SqliteEventLogStorage, "_initdb", lambda *args, **kw: built.append(args))
    ours.store_event_batch(_materialisations("run-2", 3))
    assert built == []  # copied, not built (0.2-0.4 s each)
    assert glob.glob(str(tmp_path / ".run-shard-template-*.sqlite")) and not glob.glob(str(tmp_path / "*.tmp"))
    assert sorted(ours.get_all_run_ids()) == ["run-1", "run-2"]
    monkeypatch.undo()

    theirs = SqliteEventLogStorage(str(tmp_path))  # Dagster's own class on the same files
    assert [e.dagster_event.partition for e in theirs.get_logs_for_run("run-2")] == ["p0000", "p0001", "p0002"]
    engine = sa.create_engine(theirs.conn_string_for_shard("run-2"))
    with engine.connect() as conn:
        db_revision, head = check_alembic_revision(get_alembic_config(sqlite_event_log.__file__), conn)
        assert db_revision == head and conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()
    ours.dispose()


def test_a_watcher_sees_events_written_by_the_pooled_storage(tmp_path: Path) -> None:
    """The webserver's live run view watches the run's file: run shards still close their connection."""
    storage = PooledSqliteEventLogStorage(str(tmp_path))
    storage.store_event(_materialisations("run-1", 1)[0])  # the run's file exists before the watch
    seen: list[EventLogEntry] = []
    storage.watch("run-1", None, lambda entry, _cursor: seen.append(entry))
    try:
        storage.store_event_batch(_materialisations("run-1", 5, start=1))
        deadline = time.monotonic() + 10
        while len(seen) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        storage.end_watch("run-1", seen.append)
        storage.dispose()
    assert len(seen) >= 6


OPT_IN = """
storage:
  custom:
    module: scrape_contracts.instance.sqlite_storage
    class: ScrapeSqliteStorage
    config:
      base_dir: {env: DAGSTER_HOME}
"""


def test_the_opt_in_config_gives_this_storage_on_the_same_files(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(OPT_IN)
    monkeypatch.setenv("DAGSTER_HOME", str(home))

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["a", "b"]))
    def shop() -> None:
        return None

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.get_ref().storage, ScrapeSqliteStorage)  # type: ignore[union-attr]
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        for key in ("a", "b"):
            assert dg.materialize([shop], instance=instance, partition_key=key).success
    # Dagster's own class reads the same files: switching back loses nothing
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.get() as instance:
        assert type(instance.event_log_storage) is SqliteEventLogStorage
        assert instance.get_materialized_partitions(dg.AssetKey("shop")) == {"a", "b"}


def test_without_hard_links_or_with_a_broken_template_runs_are_built_as_dagster_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import glob
    import os

    # a file system without hard links (SMB, some FUSE mounts): Dagster's own way, nothing left behind
    def no_links(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    ours = PooledSqliteEventLogStorage(str(tmp_path / "nolink"))
    monkeypatch.setattr(os, "link", no_links)
    ours.store_event_batch(_materialisations("run-1", 2))
    monkeypatch.undo()
    assert [e.dagster_event.partition for e in ours.get_logs_for_run("run-1")] == ["p0000", "p0001"]
    assert not glob.glob(str(tmp_path / "nolink" / "*.tmp"))
    ours.dispose()

    # a template a power cut left empty: set aside, never copied into a run
    ours = PooledSqliteEventLogStorage(str(tmp_path / "broken"))
    ours.store_event_batch(_materialisations("run-1", 1))
    ours.dispose()
    [template] = glob.glob(str(tmp_path / "broken" / ".run-shard-template-*.sqlite"))
    Path(template).write_bytes(b"")
    fresh = PooledSqliteEventLogStorage(str(tmp_path / "broken"))  # a new process
    fresh.store_event_batch(_materialisations("run-2", 2))
    assert [e.dagster_event.partition for e in fresh.get_logs_for_run("run-2")] == ["p0000", "p0001"]
    fresh.store_event_batch(_materialisations("run-3", 1))  # and the next one has a sound template again
    assert Path(template).stat().st_size > 0
    assert [e.dagster_event.partition for e in fresh.get_logs_for_run("run-3")] == ["p0000"]
    fresh.dispose()


def test_no_shipped_instance_config_names_a_class_of_this_project() -> None:
    """A platform team's dagster.yaml needs nothing of ours: the shipped ones name Dagster's classes only."""
    import yaml

    # deploy/celery_worker.yaml is a Celery worker's settings (dagster-celery worker start -y), not an instance
    instances = [p for p in sorted((REPO / "deploy").glob("*.yaml")) if p.name != "celery_worker.yaml"]
    for path in [REPO / "dagster.yaml", *instances]:
        config = yaml.safe_load(path.read_text())
        modules = [section.get("module") for section in _sections(config)]
        assert modules and all(m == "dagster" or m.startswith("dagster_") for m in modules), (path, modules)


def _sections(config: object) -> list[dict]:
    """Every mapping in the config that names a class (module + class)."""
    found = []
    if isinstance(config, dict):
        if "module" in config and "class" in config:
            found.append(config)
        for value in config.values():
            found += _sections(value)
    elif isinstance(config, list):
        for value in config:
            found += _sections(value)
    return found
