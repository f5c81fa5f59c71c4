"""Where state lives. One place reads the environment, so every entry point agrees."""

from __future__ import annotations

import os
from pathlib import Path


def dagster_home() -> Path:
    """``DAGSTER_HOME`` when set; otherwise ``.dagster_home`` in the working directory."""
    return Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()


def db_url() -> str:
    """The project store: ``SCRAPE_CONTRACTS_DB_URL`` (PostgreSQL in production) or SQLite in DAGSTER_HOME."""
    return os.environ.get("SCRAPE_CONTRACTS_DB_URL") or f"sqlite:///{dagster_home() / 'scrape_contracts.db'}"


def artifacts_dir() -> Path:
    return Path(os.environ.get("SCRAPE_CONTRACTS_ARTIFACTS_DIR") or dagster_home() / "artifacts")
