"""Read accepted data without Dagster."""

from __future__ import annotations

import pandas as pd

from scrape_contracts import settings


def read_accepted(contract: str, *, db_url: str | None = None, partitions: list[str] | None = None
                  ) -> pd.DataFrame:
    """The latest accepted record of every partition of ``contract`` (one row per target page).

    Columns: ``partition``, ``url``, the contract's fields, then ``_version``, ``_accepted_at``, ``_run_id``.
    Reads the project store at ``db_url`` (default ``SCRAPE_CONTRACTS_DB_URL`` or the SQLite file in
    ``DAGSTER_HOME``). Quarantined and rejected candidates never appear here.
    """
    from scrape_contracts.adapters.store import ProjectStore

    store = ProjectStore(db_url or settings.db_url())
    return accepted_frame(store.latest_accepted_all(contract, partitions))


def accepted_frame(versions: list) -> pd.DataFrame:
    rows = [{"partition": v.partition, "url": v.url, **v.record, "_version": v.version,
             "_accepted_at": v.created_at, "_run_id": v.run_id} for v in versions]
    return pd.DataFrame(rows)
