"""The benchmark's Dagster instances, as shipped: the laptop profile (``dagster.yaml``, SQLite in DAGSTER_HOME) and
the production profile (``deploy/dagster.postgres.yaml``) on a throw-away PostgreSQL database."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("SCRAPE_CONTRACTS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class InstanceEnv:
    """A fresh Dagster instance (DAGSTER_HOME) plus the project store, as environment for every process."""

    label: str
    home: Path
    db_url: str
    env: dict[str, str]

    def dagster_instance(self) -> Any:
        import dagster as dg

        with patched_environ({k: v for k, v in self.env.items() if k in ("DAGSTER_PG_URL", "DAGSTER_HOME")}):
            return dg.DagsterInstance.get()  # a new instance from $DAGSTER_HOME/dagster.yaml on every call

    def create_storage(self) -> InstanceEnv:
        """Create the instance's tables now, from one process: processes that all find a fresh instance
        race to stamp its schema version (SQLite ends up with two alembic heads)."""
        self.dagster_instance().dispose()
        return self


@contextlib.contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _base_env(contracts_dir: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SCRAPE_CONTRACTS_DB_URL", "DAGSTER_PG_URL", "SCRAPE_CONTRACTS_ARTIFACTS_DIR")}
    env.update(DAGSTER_HOME=str(home), SCRAPE_CONTRACTS_DIR=str(contracts_dir), PYTHONUNBUFFERED="1")
    return env


def sqlite_instance(workdir: Path, contracts_dir: Path, name: str = "sqlite") -> InstanceEnv:
    """The laptop profile a user gets: the repo's dagster.yaml, SQLite in DAGSTER_HOME, the store beside it."""
    home = workdir / f"home-{name}"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    db_url = f"sqlite:///{home / 'scrape_contracts.db'}"
    return InstanceEnv("sqlite", home, db_url, _base_env(contracts_dir, home)).create_storage()


def postgres_reachable() -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 (any failure means no usable server)
        return False


# What docs/production.md recommends appending to DAGSTER_PG_URL for sweeps of many targets: Dagster's storage
# commits without waiting for the disk (the project store's sessions turn it back on for themselves).
ASYNC_COMMITS = "options=-c%20synchronous_commit%3Doff"


@contextlib.contextmanager
def postgres_instance(workdir: Path, contracts_dir: Path, name: str = "postgres", *,
                      async_commits: bool = False) -> Iterator[InstanceEnv]:
    """The production profile on a throw-away database (instance and project store, both schemas made as
    docs/production.md's setup makes them), dropped at the end;
    ``async_commits``: with the URL docs/production.md recommends for large sweeps, shared by both as there."""
    import sqlalchemy as sa

    database = f"sc_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{database}"
    try:
        home = workdir / f"home-{name}"
        home.mkdir()
        shutil.copy(REPO / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
        env = _base_env(contracts_dir, home)
        shared = f"{url}?{ASYNC_COMMITS}" if async_commits else url
        env.update(DAGSTER_PG_URL=shared, SCRAPE_CONTRACTS_DB_URL=shared)
        instance = InstanceEnv("postgres-async" if async_commits else "postgres", home, shared, env).create_storage()
        # the project store's tables too, as docs/production.md's setup does (`scrape-contracts db upgrade`): a
        # first sweep then measures sweeping, not creating the schema once (about 0.25 s, measured here)
        from scrape_contracts.adapters.store import upgrade_schema

        upgrade_schema(shared)
        yield instance
    finally:
        # this process's own connections (reading the accepted data) are ended with everyone else's
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE datname = '{database}'"))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}"'))
        admin.dispose()
