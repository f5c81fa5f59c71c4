"""Alembic's entry point: runs the migrations on the connection ``migrations.upgrade`` hands over.

The caller holds the schema lock and the transaction; this only tells Alembic where the version is kept.
"""

from __future__ import annotations

from alembic import context

from scrape_contracts.adapters.migrations import VERSION_TABLE, ours
from scrape_contracts.adapters.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the store's migrations with `scrape-contracts db upgrade` "
                       "(or scrape_contracts.adapters.migrations.upgrade), not with the alembic command")

context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                  include_name=ours, render_as_batch=connection.dialect.name == "sqlite",
                  transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
