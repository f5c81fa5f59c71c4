"""A batched run split into chunk steps tells every target's story exactly as one step does."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster.components.testing import create_defs_folder_sandbox

from scrape_contracts import ScrapeContracts
from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.batch import ChunkTally, counting_earlier
from scrape_contracts.defs.chunks import deal
from scrape_contracts.defs.executors import ExecutorUnavailable, scale_from
from scrape_contracts.defs.history import batch_summaries
from scrape_contracts.service.batch import BatchTarget
from scrape_contracts_tests.conftest import Harness, product_page

KEYS = [f"p{i:02d}" for i in range(12)]


def _events(result: dg.ExecuteInProcessResult) -> Counter[tuple[str, str, str | None, str]]:
    """Each target's events, as (type, asset, partition, what): the same from one step or from chunks."""
    found: Counter[tuple[str, str, str | None, str]] = Counter()
    for event in result.all_events:
        if event.is_step_materialization:
            m = event.step_materialization_data.materialization
            found[("materialization", m.asset_key.to_user_string(), m.partition,
                   str(m.metadata["version"].value))] += 1
        elif event.event_type_value == "ASSET_OBSERVATION":
            o = event.asset_observation_data.asset_observation
            found[("observation", o.asset_key.to_user_string(), o.partition, str(o.metadata["stage"].value))] += 1
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            e = event.event_specific_data
            found[("check", e.check_name, e.partition, str(e.passed))] += 1
    return found


def test_chunk_steps_give_the_events_and_records_of_one_step(sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    for i, key in enumerate(KEYS):
        site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
    site.set_page("/p/p03", product_page("Book 3", "BK-3", "$-5.00"))  # a failing check: quarantined
    site.set_page("/p/p05", "gone", status=404)  # a fetch failure
    urls = {key: site.url(f"/p/{key}") for key in KEYS}
    harness.write_product_contract("one", urls)
    harness.write_product_contract("many", urls)
    one = harness.run_batch("one", defs=harness.definitions())
    chunked_defs = build_definitions(harness.contracts_dir, db_url=harness.backend.db_url, chunks=3)
    many = harness.run_batch("many", defs=chunked_defs)
    assert one.success and many.success
    chunk_steps = {e.step_key for e in many.all_events if (e.step_key or "").startswith("many_scrape_chunk")}
    assert chunk_steps == {f"many_scrape_chunk[chunk_{i}]" for i in range(3)}

    def renamed(events: Counter) -> Counter:
        return Counter({(kind, asset.replace("many", "one"), partition, what): n
                        for (kind, asset, partition, what), n in events.items()})

    assert renamed(_events(many)) == _events(one)
    [summary_one] = batch_summaries(harness.instance, "one", [one.run_id])
    [summary_many] = batch_summaries(harness.instance, "many", [many.run_id])
    for summary in (summary_one, summary_many):
        summary.pop("seconds"), summary.pop("pages_per_second")
    assert summary_many == summary_one
    for key in KEYS:
        mine, theirs = harness.store.latest_accepted("many", key), harness.store.latest_accepted("one", key)
        assert (mine and (mine.version, mine.record)) == (theirs and (theirs.version, theirs.record))

    # what a chunk handed out again finds its earlier attempt recorded, and counts instead of scraping again:
    # the same tally as the run's own outcomes
    recorded = harness.store.recorded_by_run("many", many.run_id, KEYS)
    assert harness.store.recorded_by_run("many", one.run_id, KEYS) == {}
    assert set(recorded) <= set(KEYS) and len(recorded) == len(harness.store.candidates_of_run(many.run_id))
    tally = counting_earlier(ChunkTally(), recorded.values())
    assert tally.targets == len(recorded)
    assert {k: v for k, v in tally.counts.items()} == \
        {k: v for k, v in summary_many["outcomes"].items() if k in {c.outcome.value for c in recorded.values()}}


def test_chunks_share_out_every_host() -> None:
    targets = [BatchTarget(f"{host}-{i}", f"http://{host}.test/{i}") for host in "ab" for i in range(4)]
    shares = deal(targets, 3)
    assert sorted(t.partition for share in shares for t in share) == sorted(t.partition for t in targets)
    assert [len(share) for share in shares] == [3, 3, 2]
    assert all({t.url.split("/")[2] for t in share} == {"a.test", "b.test"} for share in shares)
    assert len(deal(targets[:2], 5)) == 2  # no empty chunk steps


def test_settings_and_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCRAPE_CONTRACTS_CHUNKS", raising=False)
    monkeypatch.delenv("SCRAPE_CONTRACTS_EXECUTOR", raising=False)
    assert (scale_from().chunks, scale_from().executor, scale_from().chunked) == (1, "in_process", False)
    monkeypatch.setenv("SCRAPE_CONTRACTS_CHUNKS", "4")
    monkeypatch.setenv("SCRAPE_CONTRACTS_EXECUTOR", "celery")
    monkeypatch.setenv("SCRAPE_CONTRACTS_CELERY_BROKER", "pyamqp://guest@rabbit//")
    scale = scale_from()
    assert (scale.chunks, scale.executor, dict(scale.celery)) == (4, "celery", {"broker": "pyamqp://guest@rabbit//"})
    assert scale_from(2, "in_process").chunks == 2  # attributes win over the environment
    with pytest.raises(ExecutorUnavailable, match="'dask' is not one of in_process, celery"):
        scale_from(executor="dask")
    monkeypatch.setenv("SCRAPE_CONTRACTS_CHUNKS", "0")
    with pytest.raises(ValueError, match="SCRAPE_CONTRACTS_CHUNKS='0' must be 1 or more"):
        scale_from()


def test_component_attributes_choose_chunks_and_celery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(component_cls=ScrapeContracts, defs_path="scrape")
        (path / "defs.yaml").write_text(textwrap.dedent("""\
            type: scrape_contracts.ScrapeContracts
            attributes:
              contracts_dir: contracts
              chunks: 4
              executor:
                celery:
                  broker: pyamqp://guest@rabbit:5672//
            """))
        with sandbox.load_component_and_build_defs(defs_path=path) as (_component, defs):
            job = defs.resolve_job_def("scrape_example_batch_job")
    assert job.executor_def.name == "celery"
    assert {node.name for node in job.nodes} == {"example_scrape_batch", "example_scrape_chunk",
                                                 "example_batch_summary"}
    execution = job.run_config_schema.config_type.fields["execution"]  # a default the launchpad shows
    assert execution.default_provided
    config = execution.default_value["config"]
    assert config["broker"] == "pyamqp://guest@rabbit:5672//"
    assert config["config_source"]["task_acks_late"] and config["config_source"]["task_reject_on_worker_lost"]


def test_each_proxys_health_is_summed_over_the_chunks_that_used_it() -> None:
    from scrape_contracts.defs.batch import ChunkTally, proxy_health

    def health(name: str, requests: int, failures: int, quarantined: bool, score: float,
               latency: float | None) -> dict:
        return {"proxy": name, "requests": requests, "failures": failures, "quarantined": quarantined,
                "quarantines": int(quarantined), "rechecks": 0, "score": score, "latency_ms": latency,
                "recheck_in_s": 5.0 if quarantined else None}

    one = ChunkTally(proxies=[health("a", 10, 0, False, 0.9, 20.0), health("b", 4, 3, True, 0.1, None)])
    two = ChunkTally(proxies=[health("a", 6, 1, False, 0.7, 35.0), health("b", 5, 0, False, 0.8, 50.0)])
    merged = {p["proxy"]: p for p in proxy_health([one, two])}
    assert (merged["a"]["requests"], merged["a"]["failures"], merged["a"]["score"], merged["a"]["latency_ms"]) == \
        (16, 1, 0.7, 35.0)
    assert merged["b"]["quarantined"] and merged["b"]["quarantines"] == 1 and merged["b"]["requests"] == 9
    assert proxy_health([one]) == one.proxies
