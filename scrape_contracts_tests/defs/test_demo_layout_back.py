"""The demo instance after its v2 round (books healed to the redesign, prices quarantined, job facts gone):
every target scraped on v1 again ends valid, healed or unchanged, never rejected for a field on the page.
(Issue 15: v1 → v2 heal → v1 used to reject books' price as missing.)"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from scrape_contracts import settings
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.cli.demo import QUIET, SITE, _definitions, _partition_keys
from scrape_contracts.defs.names import scrape_job_name


@pytest.mark.parametrize("force", [False, True])
def test_demo_back_to_v1_after_the_v2_heal(demo_home: Path, force: bool) -> None:
    instance = dg.DagsterInstance.get()
    store = ProjectStore(settings.db_url())
    healed_before = {c: len(store.selector_history(c)) for c in ("books", "jobs")}
    assert healed_before["books"] >= 2  # the demo healed books on v2
    defs = _definitions("v1")
    tags = {"scrape_contracts/force": "true"} if force else {}
    seen = {}
    for contract in ("books", "jobs"):
        job = defs.resolve_job_def(scrape_job_name(contract))
        for key in _partition_keys(defs, scrape_job_name(contract), instance):
            result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False,
                                            run_config=QUIET, tags=tags)
            candidate = store.latest_candidate(contract, key, run_id=result.run_id)
            seen[(contract, key)] = (candidate.outcome, candidate.record)
    for (contract, key), (outcome, record) in seen.items():
        assert outcome in ("valid", "healed", "unchanged"), (contract, key, outcome)
        assert all(value is not None for value in record.values()), (contract, key, record)
    assert seen[("books", "dune")][1]["price"] == 12.99  # v1's price, read with the contract's own selector
    # going back cost no heal: the layout the contract was written for is read by its own selectors
    assert {c: len(store.selector_history(c)) for c in ("books", "jobs")} == healed_before
    assert (SITE / "v1").is_dir()
