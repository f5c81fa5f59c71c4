"""A PostgreSQL view per contract of its accepted records, typed: what tools that read tables read.

``accepted.<contract>`` holds the columns of ``contract/columns.py`` (``view_columns``): one row per target
(its latest accepted record) or, for a list contract, one row per record of each target's latest set, each
field cast to its type. It reads ``sc_accepted`` live: a new accepted version is in it at once. Its columns
follow the contract, so it is made again when the contract's fields change (``scrape-contracts export odcs``
does, in the same step that writes the ODCS document describing it). The project store's tables keep their
JSON; nothing is copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from scrape_contracts.adapters.schema import accepted, partition_state
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.errors import StoreError
from scrape_contracts.contract.columns import (
    LAST_SUCCESS, PG_TYPES, VIEW_SCHEMA, sql_identifier, sql_literal, view_columns, view_name,
)
from scrape_contracts.engine.lists import RECORDS

if TYPE_CHECKING:
    from scrape_contracts.contract.model import Contract


def view_sql(contract: Contract) -> str:
    """The SELECT of the view: latest accepted version per target, fields cast from the record's JSON."""
    a, s = accepted.name, partition_state.name
    source = "r.item" if contract.is_list else "a.record::jsonb"
    own = {"partition": "a.partition", "url": "a.url", "_version": "a.version", "_accepted_at": "a.created_at",
           "_run_id": "a.run_id", LAST_SUCCESS: "s.last_success_at"}
    selects = []
    for column in view_columns(contract):
        # every column cast to the type the ODCS document names (the store's are varchar(n), integer)
        value = own[column.name] if column.name in own and not column.field else \
            f"({source} ->> {sql_literal(column.name)})"
        selects.append(f"{value}::{PG_TYPES[column.type]} AS {sql_identifier(column.name)}")
    items = f"\nCROSS JOIN LATERAL jsonb_array_elements(a.record::jsonb -> {sql_literal(RECORDS)}) AS r(item)" \
        if contract.is_list else ""
    name = sql_literal(contract.name)
    return (f"SELECT {', '.join(selects)}\nFROM {a} a\n"
            f"JOIN (SELECT partition, max(version) AS version FROM {a} WHERE contract = {name} "
            f"GROUP BY partition) n ON n.partition = a.partition AND n.version = a.version{items}\n"
            f"LEFT JOIN {s} s ON s.contract = a.contract AND s.partition = a.partition\n"
            f"WHERE a.contract = {name}")


class AcceptedViewsMixin(Connected):
    def create_accepted_view(self, contract: Contract) -> str:
        """Make (or make again) the view of ``contract``'s accepted records; its qualified name."""
        if self.engine.dialect.name != "postgresql":
            raise StoreError(f"the view of {contract.name}'s accepted records is made on a PostgreSQL project "
                             f"store, and this one is {self.engine.dialect.name}: set SCRAPE_CONTRACTS_DB_URL "
                             "to the production store, or export the data as a file (`scrape-contracts export "
                             "data`)")
        name = view_name(contract.name)
        with self._tx() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {VIEW_SCHEMA}"))
            # dropped first: CREATE OR REPLACE cannot remove or retype a column (a field removed or retyped)
            conn.execute(sa.text(f"DROP VIEW IF EXISTS {name}"))
            conn.execute(sa.text(f"CREATE VIEW {name} AS\n{view_sql(contract)}"))
            conn.execute(sa.text(f"COMMENT ON VIEW {name} IS "
                                 f"{sql_literal(f'accepted records of the scrape contract {contract.name}')}"))
        return f"{VIEW_SCHEMA}.{contract.name}"
