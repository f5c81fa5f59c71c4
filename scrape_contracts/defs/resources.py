"""Resources: small ConfigurableResources around the adapters, configured from the environment."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from scrape_contracts import settings
from scrape_contracts.adapters.artifacts import ArtifactStore
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.fetch import FetchSettings


class ProjectStoreResource(dg.ConfigurableResource):
    """Accepted versions, candidates, selector versions, reviews (SQLAlchemy URL)."""

    db_url: str

    def get(self) -> ProjectStore:
        return ProjectStore(self.db_url)


class ArtifactStoreResource(dg.ConfigurableResource):
    """Raw fetched pages, content-addressed."""

    root: str

    def get(self) -> ArtifactStore:
        return ArtifactStore(self.root)


class FetchResource(dg.ConfigurableResource):
    """Deployment-wide fetch overrides; per-target settings live in each contract's ``fetch:`` block."""

    # points every fixture-adapter contract at another site snapshot (the demo swaps layouts with it)
    fixture_root: str | None = None

    def settings_for(self, fetch: FetchSettings) -> FetchSettings:
        if self.fixture_root and fetch.adapter == "fixture":
            return fetch.model_copy(update={"fixture_dir": str(Path(self.fixture_root).resolve())})
        return fetch


def _env_or(name: str, default: str) -> str | dg.EnvVar:
    # EnvVar shows as "env var" in the UI and is resolved at launch; the default keeps a fresh clone working
    return dg.EnvVar(name) if os.environ.get(name) else default


def default_resources(*, db_url: str | None = None, artifacts_dir: Path | str | None = None) -> dict[str, object]:
    """The resources every contract's assets use; ``db_url`` and ``artifacts_dir``, when given, win over the
    environment (a component's attributes), otherwise the settings' environment variables and defaults."""
    from scrape_contracts.defs.io_managers import AcceptedIOManager, CandidateIOManager

    store = ProjectStoreResource(db_url=db_url or _env_or("SCRAPE_CONTRACTS_DB_URL", settings.db_url()))
    return {
        "store": store,
        "artifacts": ArtifactStoreResource(root=str(artifacts_dir) if artifacts_dir else _env_or(
            "SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(settings.artifacts_dir()))),
        "fetcher": FetchResource(fixture_root=os.environ.get("SCRAPE_CONTRACTS_FIXTURE_ROOT")),
        "candidate_io_manager": CandidateIOManager(store=store),
        "accepted_io_manager": AcceptedIOManager(store=store),
    }
