"""Schema migrations of the project store (Alembic), applied when a store is opened.

Opening a store reads its revision from ``sc_alembic_version`` (one query; Alembic itself is not even
imported) and, when it is ``HEAD``, that is all. Otherwise ``upgrade`` runs every missing revision in
one transaction under a lock, so processes opening one store together take turns and the later ones find
it at ``HEAD``: a PostgreSQL advisory lock, and on SQLite the write lock of ``BEGIN IMMEDIATE``. A store
made before migrations (tables but no version table) is stamped ``PREVIOUS_RELEASE`` and upgraded in
place. A store at a revision this code does not know was upgraded by a newer release: ``NewerSchema``.
The version table is not Alembic's default ``alembic_version``: Dagster's own storage keeps that one,
and both may live in the same PostgreSQL database.

Adding a migration (a table, a column, an index):

1. change the tables in ``adapters/schema.py``;
2. ``python -m scrape_contracts.adapters.migrations revision "add the outbox"`` writes
   ``versions/<next>_add_the_outbox.py`` with what Alembic finds between ``HEAD`` and ``schema.py``;
   read it and keep it self-contained (types spelled out, never ``import schema``: a migration must keep
   describing the schema of its own time); on SQLite, changes other than adding a table, column or index
   go through ``op.batch_alter_table`` (0002 shows how);
3. set ``HEAD`` below to the new revision; its id is ``<number>_<slug>`` (``0009_repair_intermediate_stores``),
   never an id used before, and once merged neither its id nor its file changes again: add the file's
   sha256 to ``scrape_contracts_tests/adapters/migration_revisions.json`` (``test_migration_ids.py``).

``scrape_contracts_tests/adapters/test_migrations.py`` fails until the three agree (the migrated schema is
compared with ``schema.py`` on SQLite and PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from alembic.config import Config

HEAD = "0015_discovery_pages"
PREVIOUS_RELEASE = "0001"  # the schema of the releases before migrations
# Revision ids are never reused (test_migration_ids.py holds every file's hash). These were used by an
# intermediate commit for a migration that its merge renumbered: a store at one has the schema of the
# revision it maps to, and is upgraded from there (0009 creates what such stores lack).
RENUMBERED = {"0008": "0005"}  # last_success_at (commit 32b5d83), merged as 0005
VERSION_TABLE = "sc_alembic_version"
# a table every release has had: its presence without a version table means "made before migrations"
LEGACY_MARKER = "sc_candidates"
# any fixed 64-bit number, the same in every process; earlier releases took it around create_all, so a
# process of the previous release opening the store meanwhile waits too
LOCK_KEY = 0x5C_C0_47_AC_75
HERE = Path(__file__).resolve().parent
# execution option of a connection that only reads: on SQLite its BEGIN does not take the write lock
READ_ONLY = "scrape_contracts_read_only"


class SchemaError(Exception):
    """The store's schema cannot be used by this code; the message says what to do."""


class NewerSchema(SchemaError):
    """The store was upgraded by a newer release of scrape_contracts than this one."""


@dataclass(frozen=True)
class SchemaState:
    """Where a store's schema stands: its revision, or none (empty database, or made before migrations)."""

    revision: str | None
    has_tables: bool
    known: bool = True  # False: a revision of a newer release than this one

    @property
    def at_head(self) -> bool:
        return self.revision == HEAD

    def describe(self) -> str:
        if self.revision == HEAD:
            return f"{HEAD} (head)"
        if not self.known:
            return (f"{self.revision}, newer than this release knows (its newest is {HEAD}): "
                    "run the release that upgraded the store")
        if self.revision is not None:
            return f"{self.revision} (head is {HEAD}: `scrape-contracts db upgrade`, or open it, upgrades it)"
        if self.has_tables:
            return f"none: made before migrations (the schema of {PREVIOUS_RELEASE}); opening it upgrades it"
        return "none: no scrape_contracts tables yet (opening the store creates them)"


def head_revision(engine: Engine) -> str | None:
    """The revision a store is at, in one query; None when it has no version table (yet)."""
    with engine.connect() as conn:
        conn.execution_options(**{READ_ONLY: True})
        try:
            revisions = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        except DBAPIError:
            return None  # no version table: the connection's transaction is rolled back on close
    return revisions[0] if len(revisions) == 1 else ",".join(sorted(revisions)) or None


def ensure_current(engine: Engine, shown: str) -> None:
    """Bring the store at ``engine`` to ``HEAD`` unless it is there already (the cheap, usual case)."""
    if head_revision(engine) != HEAD:
        upgrade(engine, shown)


def state(engine: Engine) -> SchemaState:
    """Where the schema stands, without changing anything (``scrape-contracts db current``)."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        has_version, has_tables = inspector.has_table(VERSION_TABLE), inspector.has_table(LEGACY_MARKER)
    revision = head_revision(engine) if has_version else None
    known = revision is None or revision in RENUMBERED or revision in _known_revisions(_config(None))
    return SchemaState(revision, has_tables, known)


def upgrade(engine: Engine, shown: str) -> tuple[str | None, str]:
    """Run the missing migrations under the schema lock; (revision before, revision after).

    Revision before is None for an empty database; a store made before migrations counts as
    ``PREVIOUS_RELEASE``. One transaction: on any error nothing is changed.
    """
    from alembic import command

    with engine.begin() as conn:
        _lock(conn)
        inspector = sa.inspect(conn)
        before = None
        if inspector.has_table(VERSION_TABLE):
            before = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
        config = _config(conn)
        if before is None and inspector.has_table(LEGACY_MARKER):
            command.stamp(config, PREVIOUS_RELEASE)
            before = PREVIOUS_RELEASE
        if before in RENUMBERED:
            command.stamp(config, RENUMBERED[before], purge=True)
            before = RENUMBERED[before]
        if before == HEAD:
            return before, HEAD  # another process upgraded it while this one waited for the lock
        if before is not None and before not in _known_revisions(config):
            raise NewerSchema(
                f"the project store at {shown} has schema revision {before}, newer than this "
                f"scrape_contracts knows (its newest is {HEAD}): run the release that upgraded it "
                "(pip install -U scrape_contracts) or point SCRAPE_CONTRACTS_DB_URL at another store")
        command.upgrade(config, HEAD)
    return before, HEAD


def ours(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate's filter: only the store's tables (Dagster's may share the database)."""
    return type_ != "table" or bool(name and name.startswith("sc_"))


def _lock(conn: Connection) -> None:
    # SQLite: the connection's BEGIN IMMEDIATE (see store._engine_for) already holds the write lock
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})


def _config(conn: Connection | None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(HERE))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    config.attributes["connection"] = conn
    return config


def _known_revisions(config: Config) -> set[str]:
    from alembic.script import ScriptDirectory

    return {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}


__all__ = ["HEAD", "NewerSchema", "PREVIOUS_RELEASE", "SchemaError", "SchemaState", "VERSION_TABLE",
           "ensure_current", "head_revision", "state", "upgrade"]
