"""IO managers: they only load. Candidates and accepted versions are written by the service layer.

``scrape/<name>/candidate`` loads as the stored ``Candidate`` of the run (the checks read its violations).
``scrape/<name>`` loads as one record (a dict) for a single partition, or as a pandas DataFrame of the
latest accepted record of every requested partition (a non-partitioned downstream asset gets all of them);
a list contract's (``records:``) always as a DataFrame, one row per record.
``run_events_io_manager`` keeps the small values between a chunked batch's steps in the run's event log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from scrape_contracts.adapters.store import Candidate
from scrape_contracts import settings
from scrape_contracts.defs.resources import PageStoreResource, FetchResource, ProjectStoreResource
from scrape_contracts.engine.lists import is_set
from scrape_contracts.service.accepted import accepted_frame

if TYPE_CHECKING:
    import pandas as pd


def contract_of(key: dg.AssetKey) -> str:
    # keys are scrape/<contract> and scrape/<contract>/candidate
    return key.path[1]


RUN_EVENTS_IO_MANAGER = "run_events_io_manager"
_RUN_EVENTS_VALUE = "scrape_contracts/value"


class CandidateIOManager(dg.ConfigurableIOManager):
    """Loads the candidate a run stored (the heal op stores it through the service)."""

    store: ProjectStoreResource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Nothing to write: the candidate is already in the project store."""

    def load_input(self, context: dg.InputContext) -> Candidate:
        contract = contract_of(context.asset_key)
        partition = context.asset_partition_key
        store = self.store.get()
        # prefer this run's candidate: another run may have written a newer one meanwhile
        candidate = store.latest_candidate(contract, partition, run_id=context.step_context.run_id) or \
            store.latest_candidate(contract, partition)
        if candidate is None:
            raise dg.Failure(f"no candidate for {contract}/{partition}: materialise scrape/{contract}/candidate first")
        return candidate


class AcceptedIOManager(dg.ConfigurableIOManager):
    """Reads the latest accepted data (the accepted asset writes through the service, not through here)."""

    store: ProjectStoreResource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Nothing to write: ``scrape/<name>`` returns a MaterializeResult after the service accepted."""

    def load_input(self, context: dg.InputContext) -> dict[str, Any] | pd.DataFrame | None:
        contract = contract_of(context.asset_key)
        store = self.store.get()
        downstream_partitioned = context.has_partition_key
        if context.has_asset_partitions and downstream_partitioned and len(context.asset_partition_keys) == 1:
            latest = store.latest_accepted(contract, context.asset_partition_key)
            if latest is not None and is_set(latest.record):
                return accepted_frame([latest], gone=set(store.gone_targets(contract)))  # one row per record
            return dict(latest.record) if latest else None
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else None
        gone = set(store.gone_targets(contract))
        return accepted_frame(store.latest_accepted_all(contract, keys), gone=gone)


def carried(value: Any) -> dict[str, dg.MetadataValue]:
    """The metadata of an output that ``RunEventsIOManager`` loads: the value itself, as JSON."""
    return {_RUN_EVENTS_VALUE: dg.MetadataValue.json(value)}


class RunEventsIOManager(dg.ConfigurableIOManager):
    """Loads a step's output (a plain JSON value) from the run's event log, where the op put it as the
    output's metadata (``carried``): every worker host reaches the instance's storage."""

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Nothing to write: the value is in the output's event."""

    def load_input(self, context: dg.InputContext) -> Any:
        upstream = context.upstream_output
        assert upstream is not None
        step, name, mapping = upstream.step_key, upstream.name, upstream.mapping_key
        run_id = context.step_context.run_id
        for entry in context.instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_OUTPUT):
            data = entry.dagster_event.step_output_data if entry.dagster_event is not None else None
            handle = data.step_output_handle if data is not None else None
            if handle is None or (handle.step_key, handle.output_name, handle.mapping_key) != (step, name, mapping):
                continue
            value = (data.metadata or {}).get(_RUN_EVENTS_VALUE)
            if value is not None:  # the first attempt that got this far: a later one says the same
                return value.value
        raise dg.Failure(f"the output {name!r} of step {step} is not in run {run_id}'s event log")


def env_or(name: str, default: str) -> str | dg.EnvVar:
    # EnvVar shows as "env var" in the UI and is resolved at launch; the default keeps a fresh clone working
    return dg.EnvVar(name) if os.environ.get(name) else default


def default_resources(*, db_url: str | None = None, pages: Path | str | None = None) -> dict[str, object]:
    """The resources every contract's assets use; ``db_url`` and ``pages`` (the page storage), when given, win
    over the environment (a component's attributes), otherwise the settings' environment variables and
    defaults."""
    store = ProjectStoreResource(db_url=db_url or env_or("SCRAPE_CONTRACTS_DB_URL", settings.db_url()))
    location = str(pages) if pages else settings.page_storage()
    if location == settings.PAGES_IN_STORE:  # the project store's own database, whatever its URL
        location = db_url or settings.db_url()
    return {
        "store": store,
        "artifacts": PageStoreResource(location=location),
        "fetcher": FetchResource(fixture_root=os.environ.get("SCRAPE_CONTRACTS_FIXTURE_ROOT")),
        "candidate_io_manager": CandidateIOManager(store=store),
        "accepted_io_manager": AcceptedIOManager(store=store),
        RUN_EVENTS_IO_MANAGER: RunEventsIOManager(),
    }
