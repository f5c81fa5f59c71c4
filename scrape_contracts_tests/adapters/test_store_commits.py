"""Which PostgreSQL commits wait for the disk: the project store's always, the shared host slots' never.

Dagster's instance and the project store often share one database URL (docs/production.md), and the URL (or
the database's defaults) may turn ``synchronous_commit`` off for the speed of Dagster's event log. The store
holds the accepted data, so its sessions turn it back on; the host slots are leases of a second that expire
by themselves, so theirs never wait.
"""

from __future__ import annotations

import sqlalchemy as sa

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.adapters.store.host_budgets import HostBudgets

ASYNC = "options=-c%20synchronous_commit%3Doff"


def _setting(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()


def test_the_store_commits_durably_when_its_url_turns_synchronous_commit_off(pg_database: str) -> None:
    url = f"{pg_database}?{ASYNC}"
    assert _setting(sa.create_engine(url)) == "off"  # what Dagster's storage gets from the same URL
    store = ProjectStore(url)
    assert _setting(store.engine) == "on"
    assert store.skipped_partitions("nothing", unchanged=False) == {}  # and the store works on it


def test_the_store_commits_durably_when_the_database_defaults_to_asynchronous_commits(pg_database: str) -> None:
    admin = sa.create_engine(pg_database, isolation_level="AUTOCOMMIT")
    database = sa.engine.make_url(pg_database).database
    with admin.connect() as conn:
        conn.execute(sa.text(f'ALTER DATABASE "{database}" SET synchronous_commit = off'))
    admin.dispose()
    assert _setting(sa.create_engine(pg_database)) == "off"
    assert _setting(ProjectStore(pg_database).engine) == "on"


def test_shared_host_slots_do_not_wait_for_the_disk_and_still_bound_the_host(pg_database: str) -> None:
    ProjectStore(pg_database)  # the slot tables
    budgets, other = HostBudgets(pg_database), HostBudgets(pg_database)
    try:
        assert _setting(budgets.engine) == "off"
        first = budgets.take("shop.example", 1, hold_s=30)
        assert first == 0
        assert other.take("shop.example", 1, hold_s=30) is None  # the one slot is held
        budgets.give_back("shop.example", first)
        assert other.take("shop.example", 1, hold_s=30) == 0
    finally:
        budgets.close()
        other.close()
