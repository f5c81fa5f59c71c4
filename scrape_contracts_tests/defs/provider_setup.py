"""What the provider tests share: a real instance (Dagster's own classes) in DAGSTER_HOME, the project store,
a site on 127.0.0.1 and the stand-in provider (scrape_contracts/testing/provider.py, a stand-in for a hosted
scraping API that cannot run here) that fetches from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.testing.provider import StandInProvider
from scrape_contracts_tests.fixture_site import FixtureSite

TOKEN = "sk-stand-in-6f0c2a9e41d7b3"  # the provider's API token: never in an event or a message


def provider_contract(name: str, urls: dict[str, str], *, budget: dict[str, Any] | None = None,
                      timeout_s: float = 5, deadline_s: float = 30, retries: int = 2,
                      concurrency: int = 4) -> dict[str, Any]:
    provider: dict[str, Any] = {"poll_interval_s": 0.02, "max_poll_interval_s": 0.1}
    if budget is not None:
        provider["budget"] = budget
    return {
        "name": name,
        "owners": ["team:data"],
        "targets": [{"url": url, "key": key} for key, url in urls.items()],
        "fetch": {"adapter": "provider", "timeout_s": timeout_s, "deadline_s": deadline_s, "retries": retries,
                  "concurrency": concurrency, "provider": provider},
        "fields": {
            "title": {"selector": "#title"},
            "sku": {"selector": "#sku"},
            "price": {"selector": "#price", "type": "price", "rules": {"min": 0}},
        },
    }


@dataclass
class ProviderSetup:
    home: Path
    db_url: str
    contracts_dir: Path
    instance: dg.DagsterInstance
    provider: StandInProvider
    site: FixtureSite

    @property
    def store(self) -> ProjectStore:
        return ProjectStore(self.db_url)

    def write(self, name: str, urls: dict[str, str], **options: Any) -> None:
        contract = provider_contract(name, urls, **options)
        (self.contracts_dir / f"{name}.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))

    def job(self, name: str) -> dg.JobDefinition:
        from scrape_contracts.defs import build_definitions

        return build_definitions(self.contracts_dir).resolve_job_def(name)

    def run_single(self, contract: str, partition: str) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs.names import scrape_job_name

        return self.job(scrape_job_name(contract)).execute_in_process(
            partition_key=partition, instance=self.instance, raise_on_error=False)

    def run_batch(self, contract: str, partitions: list[str] | None = None,
                  tags: dict[str, str] | None = None) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs.names import batch_job_name

        return self.job(batch_job_name(contract)).execute_in_process(
            run_config={"ops": {f"{contract}_scrape_batch": {"config": {"partitions": partitions or []}}}},
            instance=self.instance, raise_on_error=False, tags=tags)

    def start_worker(self, contract: str, partition: str) -> subprocess.Popen[bytes]:
        """A single-target run in a process of its own (a run worker the test can SIGKILL)."""
        code = (f"import dagster as dg; from scrape_contracts.defs import build_definitions; "
                f"defs = build_definitions({str(self.contracts_dir)!r}); "
                f"job = defs.resolve_job_def('scrape_{contract}_job'); "
                f"job.execute_in_process(partition_key={partition!r}, instance=dg.DagsterInstance.get())")
        return subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def events_text(self, run_id: str) -> str:
        """Every event of a run, serialised: what the UI and the event log hold."""
        from dagster._serdes import serialize_value

        return "\n".join(serialize_value(entry) for entry in self.instance.all_logs(run_id))


def batch_summary(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """The batch summary observation's metadata, as plain values."""
    for event in result.all_events:
        if event.event_type_value == "ASSET_OBSERVATION":
            metadata = event.event_specific_data.asset_observation.metadata
            if metadata.get("stage") and metadata["stage"].value == "batch_summary":
                return {k: v.value for k, v in metadata.items()}
    raise AssertionError("no batch summary")


def wait_until(what: str, condition: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g}s"
        time.sleep(0.05)


@pytest.fixture
def provider_setup(request: pytest.FixtureRequest, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderSetup]:
    """SQLite by default; ``@pytest.mark.parametrize("provider_setup", ["postgres"], indirect=True)`` puts the
    instance and the project store on PostgreSQL."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    config: dict[str, Any] = {"telemetry": {"enabled": False}}  # Dagster's own classes
    if getattr(request, "param", "sqlite") == "postgres":
        db_url = request.getfixturevalue("pg_database")
        config["storage"] = {"postgres": {"postgres_url": db_url}}
    else:
        db_url = f"sqlite:///{home / 'scrape_contracts.db'}"
    (home / "dagster.yaml").write_text(json.dumps(config))
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    with FixtureSite() as site, StandInProvider(token=TOKEN) as provider:
        for name, value in {"DAGSTER_HOME": str(home), "SCRAPE_CONTRACTS_DB_URL": db_url,
                            "SCRAPE_CONTRACTS_ARTIFACTS_DIR": str(home / "artifacts"),
                            "SCRAPE_CONTRACTS_PARSE_WORKERS": "0",
                            "SCRAPE_CONTRACTS_PROVIDER_URL": provider.url,
                            "SCRAPE_CONTRACTS_PROVIDER_TOKEN": TOKEN}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(contracts_dir))
        ProjectStore(db_url)
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            yield ProviderSetup(home, db_url, contracts_dir, instance, provider, site)
        finally:
            instance.dispose()
            engine = store_module._engines.pop(db_url, None)
            if engine is not None:
                engine.dispose()
