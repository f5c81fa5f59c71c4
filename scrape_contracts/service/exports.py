"""Accepted data handed to other tools: an ODCS document of a contract, and its records as a typed file.

``odcs_export`` writes the contract as ODCS (``contract/odcs.py``) and, on a PostgreSQL project store, makes
the view the document describes, so that ``datacontract test`` reads what the document says.
``accepted_table`` is the table ``read_accepted`` gives, typed by the fields (``contract/columns.py``): the
latest accepted record of each target, or as of a moment; ``write_table`` writes it as Parquet, CSV or JSON
Lines. Dagster-free: the CLI calls these.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from scrape_contracts.contract.columns import ColumnType, accepted_columns
from scrape_contracts.contract.odcs import Server, odcs_document
from scrape_contracts.service.accepted import GONE, accepted_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from scrape_contracts.adapters.store import AcceptedVersion, ProjectStore
    from scrape_contracts.contract.model import Contract


class DataFormat(str, Enum):
    PARQUET = "parquet"
    CSV = "csv"
    JSONL = "jsonl"


class ExportError(ValueError):
    """What was asked cannot be exported as asked: the message says what to change."""


def server_of(db_url: str) -> Server | None:
    """The ODCS server of a PostgreSQL project store (None for SQLite: no view, no server)."""
    url = sa.engine.make_url(db_url)
    if url.get_backend_name() != "postgresql":
        return None
    return Server(host=url.host or "localhost", port=url.port or 5432, database=url.database or "postgres")


def odcs_export(contract: Contract, store: ProjectStore | None) -> tuple[dict[str, Any], str | None]:
    """The ODCS document, and the view made for it (None when ``store`` is None or SQLite)."""
    server = server_of(store.url) if store is not None else None
    view = store.create_accepted_view(contract) if server is not None else None
    return odcs_document(contract, server), view


def accepted_versions(store: ProjectStore, contract: Contract, *, partitions: Sequence[str] | None = None,
                      at: dt.datetime | None = None) -> list[AcceptedVersion]:
    if at is not None and at.tzinfo is None:
        raise ExportError(f"--at {at.isoformat()} has no time zone: give one, e.g. {at.isoformat()}Z or "
                          f"{at.isoformat()}+01:00")
    return store.latest_accepted_all(contract.name, list(partitions) if partitions else None,
                                     as_of=at.astimezone(dt.timezone.utc) if at else None)


def accepted_table(contract: Contract, versions: Sequence[AcceptedVersion], *,
                   gone: Collection[str] = frozenset()) -> pa.Table:
    """One row per target (a list contract: per record of each target's set), each column of its type, and
    ``_gone`` last as ``read_accepted`` has it: True for the targets in ``gone`` (their discovery source no
    longer lists them; their data stays)."""
    import pyarrow as pa

    columns = accepted_columns(contract)
    rows = accepted_rows(versions)
    arrays = {c.name: pa.array([_typed(c.type, row.get(c.name)) for row in rows], type=arrow_type(c.type))
              for c in columns}
    arrays[GONE] = pa.array([row["partition"] in gone for row in rows], type=pa.bool_())
    fields = [pa.field(c.name, arrow_type(c.type), nullable=not c.required) for c in columns]
    fields.append(pa.field(GONE, pa.bool_(), nullable=False))
    return pa.Table.from_pydict(arrays, schema=pa.schema(fields, metadata={"contract": contract.name}))


def arrow_type(kind: ColumnType) -> pa.DataType:
    import pyarrow as pa

    return {ColumnType.STRING: pa.string(), ColumnType.NUMBER: pa.float64(), ColumnType.INTEGER: pa.int64(),
            ColumnType.BOOLEAN: pa.bool_(), ColumnType.DATE: pa.date32(),
            ColumnType.TIMESTAMP: pa.timestamp("us", tz="UTC")}[kind]


def _utc(value: dt.datetime) -> dt.datetime:
    # SQLite gives timestamps back without their zone; they were written in UTC
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)


def _typed(kind: ColumnType, value: Any) -> Any:
    """A record's JSON value as its column's Python value (dates and times are ISO strings in records)."""
    if value is None:
        return None
    if kind is ColumnType.DATE:
        return dt.date.fromisoformat(value) if isinstance(value, str) else value
    if kind is ColumnType.TIMESTAMP:  # a datetime field (an ISO string), or _accepted_at
        return _utc(dt.datetime.fromisoformat(value) if isinstance(value, str) else value)
    if kind is ColumnType.NUMBER:
        return float(value)
    return value


def write_table(table: pa.Table, fmt: DataFormat, out: Path) -> None:
    """``table`` to ``out``: Parquet keeps the types; CSV and JSON Lines write dates and times in ISO 8601."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt is DataFormat.PARQUET:
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif fmt is DataFormat.CSV:
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, out)
    else:
        with out.open("w", encoding="utf-8") as handle:
            for row in table.to_pylist():
                handle.write(json.dumps(row, ensure_ascii=False, default=_iso) + "\n")


def _iso(value: Any) -> str:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
