"""The laptop instance's storage: Dagster's embedded SQLite, with connections kept and event blocks written once.

Dagster's ``SqliteEventLogStorage`` builds a new SQLAlchemy engine and opens (and closes) a new SQLite
connection for every statement group, four per asset event, and writes a block of events one event at a
time. Closing the last connection of a WAL database checkpoints it, so each materialisation of a batched
run cost about 7 ms of the run's time (measured with Dagster 1.13.27; ``benchmarks/throughput.py`` for the
whole picture). Two changes, nothing else:

- one engine per shard, kept (a bounded number of them); the cross-run index shard keeps its connection
  open in a small pool. Run shards keep Dagster's connection-per-use, because the webserver's live run view
  watches each run's ``.db`` file for changes, which only a checkpoint (on close) writes;
- ``store_event_batch`` writes a block of materialisations (or observations) in one transaction per shard,
  as the PostgreSQL storage does with a multi-row insert, instead of one transaction per event.

The files, tables and schema are Dagster's own: an instance can switch to or from this class at any time.
An opt-in for a laptop or a single-machine SQLite instance; no shipped config names it. To use it, in
``$DAGSTER_HOME/dagster.yaml``::

    storage:
      custom:
        module: scrape_contracts.instance.sqlite_storage
        class: ScrapeSqliteStorage
        config:
          base_dir: {env: DAGSTER_HOME}

It overrides private methods of Dagster's storage (``_connect``); Dagster is pinned in ``pyproject.toml``
and ``scrape_contracts_tests/instance/test_sqlite_storage.py`` fails if an upgrade changes what they rely on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
import yaml
from dagster import __version__ as dagster_version
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME, SQLITE_BUSY_TIMEOUT_SECONDS, SqliteEventLogStorage,
)
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage, _event_logs_directory
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import NullPool, QueuePool

# engines kept per process (run shards come and go; the index shard stays)
_MAX_ENGINES = 16
_BATCHABLE = ({DagsterEventType.ASSET_MATERIALIZATION}, {DagsterEventType.ASSET_OBSERVATION})


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log, with kept engines and one transaction per block of asset events."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, sa.Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._pid = os.getpid()
        self._template_checked = False
        super().__init__(base_dir, inst_data=inst_data)

    def _engine(self, shard: str) -> sa.Engine:
        with self._engines_lock:
            if self._pid != os.getpid():  # a forked child must not share its parent's connections
                self._engines = OrderedDict()
                self._pid = os.getpid()
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            kept = shard == INDEX_SHARD_NAME
            engine = sa.create_engine(
                self.conn_string_for_shard(shard),
                # the index is read and written by every run: keep one connection open (no checkpoint per
                # event); a run shard closes its connection after use so the checkpoint tells the watchers
                poolclass=QueuePool if kept else NullPool,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
                **({"pool_size": 1, "max_overflow": 4, "pool_pre_ping": False} if kept else {}),
            )
            self._engines[shard] = engine
            while len(self._engines) > _MAX_ENGINES:
                _, old = self._engines.popitem(last=False)
                old.dispose()
            return engine

    def _forget(self, shard: str | None = None) -> None:
        with self._engines_lock:
            for name in [shard] if shard else list(self._engines):
                engine = self._engines.pop(name, None)
                if engine is not None:
                    engine.dispose()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[sa.Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                if shard == INDEX_SHARD_NAME or not self._new_shard_from_template(shard):
                    self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _new_shard_from_template(self, shard: str) -> bool:
        """Create a new run's ``.db`` as a copy of an empty one made once (kept beside them, not named
        ``*.db``): Dagster builds each from scratch (tables, indexes, an Alembic stamp), 0.2-0.4 s of every
        run's first event, which ``scrape-contracts run`` pays before its run is queued. False: the file
        exists, or no copy could be made (Dagster's own way then builds it)."""
        path = self.path_for_shard(shard)
        if os.path.exists(path):
            return False
        copy = f"{path}.{os.getpid()}.tmp"
        try:
            template = self._template()
            if template is None:
                return False
            shutil.copyfile(template, copy)
            os.link(copy, path)  # only if nobody created it meanwhile
        except OSError:  # it exists now; or a file system without hard links, or full: build it as Dagster does
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)
        return True

    def _template(self) -> str | None:
        """The empty run file to copy, made (and checked) once; None when it cannot be trusted."""
        template = os.path.join(self._base_dir, f".run-shard-template-{dagster_version}.sqlite")
        if self._template_checked:
            return template
        if not os.path.exists(template):
            building = f"{template}.{os.getpid()}.tmp"
            engine = sa.create_engine(f"sqlite:///{building}", poolclass=NullPool)
            try:
                super()._initdb(engine)
            finally:
                engine.dispose()  # the last connection closed: checkpointed, no -wal file left
            with open(building, "rb") as handle:
                os.fsync(handle.fileno())  # a power cut must not leave an empty template behind
            os.replace(building, template)
        try:  # a template left broken (truncated, another version's) is set aside, not copied
            with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as conn:
                tables = {row[0] for row in conn.execute("select name from sqlite_master where type='table'")}
                stamped = conn.execute("select count(*) from alembic_version").fetchone()[0] == 1
        except sqlite3.Error:
            tables, stamped = set(), False
        if "event_logs" not in tables or not stamped:
            with contextlib.suppress(OSError):
                os.unlink(template)
            return None
        self._template_checked = True
        return template

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        kinds = {e.dagster_event.event_type for e in events if e.dagster_event is not None}
        if not events or len({e.run_id for e in events}) != 1 or kinds not in _BATCHABLE \
                or any(e.dagster_event is None or e.dagster_event.is_asset_failed_to_materialize for e in events):
            super().store_event_batch(events)  # one by one, as Dagster does
            return
        # one statement for all rows (compiled once), as prepare_insert_event would build them one by one
        rows = [self._event_to_row(e) for e in events]
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        # mirrored into the index shard in one transaction: tags per event, the asset row once per asset
        with self.index_transaction() as conn:
            returned = conn.execute(SqlEventLogStorageTable.insert().returning(
                SqlEventLogStorageTable.c.id, sort_by_parameter_order=True), rows)
            ids = [row[0] for row in returned]
            self._store_asset_event_tags(conn, list(events), ids)
            last: dict[Any, tuple[EventLogEntry, int]] = {}
            for event, event_id in zip(events, ids):
                last[event.dagster_event.asset_key] = (event, event_id)  # type: ignore[union-attr]
            for event, event_id in last.values():
                self._store_asset_event(conn, event, event_id)

    def delete_events(self, run_id: str) -> None:
        super().delete_events(run_id)
        self._forget(run_id)

    def wipe(self) -> None:
        self._forget()
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._forget()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data


class ScrapeSqliteStorage(DagsterSqliteStorage):
    """Dagster's embedded SQLite storage (same files under ``base_dir``) with the faster event log above."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(base_dir, inst_data=inst_data)
        self._event_log_storage = PooledSqliteEventLogStorage(_event_logs_directory(base_dir))

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Any) -> ScrapeSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)

    @property
    def event_storage_data(self) -> ConfigurableClassData | None:
        return ConfigurableClassData(__name__, PooledSqliteEventLogStorage.__name__,
                                     yaml.dump({"base_dir": _event_logs_directory(self.base_dir)},
                                               default_flow_style=False))
