"""Resources: small ConfigurableResources around the adapters, configured from the environment."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from scrape_contracts.adapters.pages import PageStore, open_pages
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.fetch import FetchSettings


class ProjectStoreResource(dg.ConfigurableResource):
    """Accepted versions, candidates, selector versions, reviews (SQLAlchemy URL)."""

    db_url: str

    def get(self) -> ProjectStore:
        return ProjectStore(self.db_url)


class PageStoreResource(dg.ConfigurableResource):
    """Raw fetched pages, content-addressed: a folder, a database URL, or s3://bucket/prefix."""

    location: str

    def get(self) -> PageStore:
        return open_pages(self.location)


class FetchResource(dg.ConfigurableResource):
    """Deployment-wide fetch overrides; per-target settings live in each contract's ``fetch:`` block."""

    # points every fixture-adapter contract at another site snapshot (the demo swaps layouts with it)
    fixture_root: str | None = None

    def settings_for(self, fetch: FetchSettings) -> FetchSettings:
        if self.fixture_root and fetch.adapter == "fixture":
            return fetch.model_copy(update={"fixture_dir": str(Path(self.fixture_root).resolve())})
        return fetch
