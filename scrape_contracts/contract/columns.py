"""The columns of a contract's table of accepted records: what ``read_accepted``, ``export data``, the
PostgreSQL view (``adapters/store/views.py``) and the ODCS document (``contract/odcs.py``) all describe.

One row per target (its latest accepted record) or, for a list contract, one row per record of each target's
latest accepted set. Each field becomes a column of the type its ``type:`` promises: the values a record
holds are JSON (a date is an ISO string), the table's are typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from scrape_contracts.contract.records import RECORD_KEY

if TYPE_CHECKING:
    from scrape_contracts.contract.model import Contract

# the PostgreSQL schema of the views of accepted records (adapters/store/views.py): accepted.<contract>
VIEW_SCHEMA = "accepted"
LAST_SUCCESS = "_last_success_at"  # only in the view: when the target last succeeded (accepted or unchanged)


class ColumnType(str, Enum):
    STRING = "string"
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"  # with time zone, UTC in exports


# a field's type → its column's; url is a string (an absolute http(s) address), price a number
FIELD_COLUMN_TYPES = {"string": ColumnType.STRING, "url": ColumnType.STRING, "number": ColumnType.NUMBER,
                      "price": ColumnType.NUMBER, "integer": ColumnType.INTEGER, "boolean": ColumnType.BOOLEAN,
                      "date": ColumnType.DATE, "datetime": ColumnType.TIMESTAMP}


# the column types of the PostgreSQL view
PG_TYPES = {ColumnType.STRING: "text", ColumnType.NUMBER: "double precision", ColumnType.INTEGER: "bigint",
            ColumnType.BOOLEAN: "boolean", ColumnType.DATE: "date", ColumnType.TIMESTAMP: "timestamp with time zone"}


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    required: bool
    description: str
    field: bool = False  # one of the contract's fields (not a column the table adds)


def accepted_columns(contract: Contract) -> tuple[Column, ...]:
    """``partition``, ``url`` (a list contract: ``record_key``), the fields, then the version's stamp."""
    head = [Column("partition", ColumnType.STRING, True, "The target (Dagster partition) the record is of."),
            Column("url", ColumnType.STRING, True, "The target's URL.")]
    if contract.is_list:
        head.append(Column(RECORD_KEY, ColumnType.STRING, True,
                           "Names the record across runs: " + (
                               f"its {', '.join(contract.records.key)}" if contract.records.key
                               else "a hash of its values") + "."))
    fields = [Column(name, FIELD_COLUMN_TYPES[spec.type], spec.required, f"Field {name} ({spec.type}).", True)
              for name, spec in contract.fields.items()]
    tail = [Column("_version", ColumnType.INTEGER, True, "The accepted version of the target this row is of."),
            Column("_accepted_at", ColumnType.TIMESTAMP, True, "When that version was accepted."),
            Column("_run_id", ColumnType.STRING, True, "The Dagster run that accepted it.")]
    return (*head, *fields, *tail)


def view_columns(contract: Contract) -> tuple[Column, ...]:
    """The accepted columns and, from the target's state, when it last succeeded (the freshness promise)."""
    return (*accepted_columns(contract),
            Column(LAST_SUCCESS, ColumnType.TIMESTAMP, False,
                   "When the target was last scraped successfully (accepted, or unchanged)."))


def sql_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def view_name(contract: str) -> str:
    """The view's qualified name as SQL writes it (the view's DDL, and the ODCS document's quality rules)."""
    return f"{VIEW_SCHEMA}.{sql_identifier(contract)}"
