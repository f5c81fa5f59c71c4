"""Read accepted data without Dagster."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from scrape_contracts import settings

# True on the rows of a target its discovery source no longer lists (read_accepted and export data)
GONE = "_gone"

if TYPE_CHECKING:  # pandas costs 0.3 s to import: only readers pay it, never a run's worker processes
    import pandas as pd


class AcceptedDataError(LookupError):
    """The accepted data asked for is not where the settings point: the message names the setting to fix."""


def open_store(db_url: str | None = None):  # -> ProjectStore
    """The existing project store the settings point at; ``AcceptedDataError`` (one line) when there is none.

    Never creates an empty store: a reader in the wrong folder must hear so, not get an empty table.
    """
    from scrape_contracts.adapters.store import StoreNotFound, existing_store

    url = db_url or settings.db_url()
    try:
        return existing_store(url)
    except StoreNotFound as exc:
        if db_url:
            fix = "pass the db_url of the store your scrapes wrote to"
        elif os.environ.get("SCRAPE_CONTRACTS_DB_URL"):
            fix = "set SCRAPE_CONTRACTS_DB_URL to the store your scrapes wrote to"
        else:
            home = settings.dagster_home()
            told = "DAGSTER_HOME=" + str(home) if os.environ.get("DAGSTER_HOME") else \
                f"DAGSTER_HOME is not set, so ./.dagster_home of {os.getcwd()} was used"
            fix = (f"{told}; set DAGSTER_HOME to the folder your scrapes ran in (the demo's .dagster_home) "
                   "or SCRAPE_CONTRACTS_DB_URL to the store's database")
        raise AcceptedDataError(f"{exc}: {fix}") from None


def read_accepted(contract: str, *, db_url: str | None = None, partitions: list[str] | None = None
                  ) -> pd.DataFrame:
    """The latest accepted record of every partition of ``contract`` (one row per target page), or of a
    list contract every record of every partition's latest accepted set (one row per record).

    Columns: ``partition``, ``url`` (a list contract: then ``record_key``), the contract's fields, then
    ``_version``, ``_accepted_at``, ``_run_id`` and ``_gone`` (True: the target's discovery source no longer
    lists it; its last accepted data is still here, and sweeps no longer refresh it).
    Reads the project store at ``db_url`` (default ``SCRAPE_CONTRACTS_DB_URL`` or the SQLite file in
    ``DAGSTER_HOME``). Quarantined and rejected candidates never appear here. Raises ``AcceptedDataError``
    when there is no store there, or the store has never seen ``contract``.
    """
    store = open_store(db_url)
    versions = store.latest_accepted_all(contract, partitions)
    if not versions:
        known = set(store.contracts())
        if contract not in known:
            # nothing accepted yet is an empty table for a contract that exists: ask the contracts folder
            from scrape_contracts.adapters.store import shown_url
            from scrape_contracts.contract.loader import load_contracts

            loaded = load_contracts().by_name()
            if contract in loaded:
                return empty_frame(list(loaded[contract].contract.fields))
            raise AcceptedDataError(
                f"no contract {contract!r} in the project store at {shown_url(store.url)} or in the contracts "
                f"folder (known: {', '.join(sorted(known | set(loaded))) or 'none'}); check the name, or "
                "DAGSTER_HOME / SCRAPE_CONTRACTS_DB_URL / SCRAPE_CONTRACTS_DIR")
    return accepted_frame(versions, gone=set(store.gone_targets(contract)))


def empty_frame(fields: list[str]) -> pd.DataFrame:
    """The columns ``read_accepted`` returns, with no row: a contract with nothing accepted yet."""
    import pandas as pd

    return pd.DataFrame(columns=["partition", "url", *fields, "_version", "_accepted_at", "_run_id", GONE])


def accepted_frame(versions: list, *, gone: set[str] | frozenset[str] = frozenset()) -> pd.DataFrame:
    """One row per accepted record: a list target (``records:``) gives one row per record of its set, with
    its ``record_key`` after ``partition`` and ``url``; ``_gone`` last, True for the partitions in
    ``gone``."""
    import pandas as pd

    frame = pd.DataFrame(accepted_rows(versions))
    frame[GONE] = frame["partition"].isin(gone) if len(frame) else pd.Series(dtype=bool)
    return frame


def accepted_rows(versions: list) -> list[dict]:
    """The rows of ``accepted_frame`` (and of ``export data``), as the records hold their values."""
    from scrape_contracts.engine.lists import is_set, set_records

    rows = []
    for v in versions:
        stamp = {"_version": v.version, "_accepted_at": v.created_at, "_run_id": v.run_id}
        if is_set(v.record):
            rows += [{"partition": v.partition, "url": v.url, **record, **stamp}
                     for record in set_records(v.record)]
        else:
            rows.append({"partition": v.partition, "url": v.url, **v.record, **stamp})
    return rows
