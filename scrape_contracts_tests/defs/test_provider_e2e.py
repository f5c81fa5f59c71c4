"""The provider adapter through Dagster: real runs on a real instance, the stand-in provider on 127.0.0.1.

The stand-in (scrape_contracts/testing/provider.py) plays a hosted scraping API, which cannot run here; it
fetches the pages from a real site on 127.0.0.1 and logs every request, so each test asserts from the
provider's side how many jobs were submitted and polled. Waits are on conditions, never on the clock.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import dagster as dg
import pytest

from scrape_contracts.adapters.statuses import ProviderJobState
from scrape_contracts.defs.names import accepted_key
from scrape_contracts_tests.conftest import failure_text, product_page
from scrape_contracts_tests.defs.provider_setup import (  # noqa: F401
    batch_summary, TOKEN, ProviderSetup, provider_setup,
)

pytestmark = pytest.mark.timeout(300)


def _candidate_output(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    for event in result.all_events:
        if event.event_type_value == "STEP_OUTPUT" and event.step_key.endswith("candidate"):
            return {k: v.value for k, v in event.event_specific_data.metadata.items()}
    raise AssertionError("no candidate output")


@pytest.mark.parametrize("provider_setup", ["sqlite", "postgres"], indirect=True)
def test_a_job_is_submitted_once_its_id_kept_before_the_first_poll_and_its_page_accepted(
        provider_setup: ProviderSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    setup, provider = provider_setup, provider_setup.provider
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "1")  # the batch's jobs run in a worker process
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    setup.site.set_page("/p/2", product_page("Emma", "BK-2", "$20.00"))
    setup.site.set_page("/p/3", product_page("Ulysses", "BK-3", "$30.00"))
    setup.write("shop", {f"p{i}": setup.site.url(f"/p/{i}") for i in (1, 2, 3)})
    provider.polls_until_done = 3
    recorded_at_poll: list[str | None] = []
    provider.before_poll = lambda job_id: recorded_at_poll.append(
        next((j.job_id for j in setup.store.provider_jobs("shop") if j.job_id == job_id), None))

    single = setup.run_single("shop", "p1")
    assert single.success, failure_text(single)
    assert setup.store.latest_accepted("shop", "p1").record == {"title": "Dune", "sku": "BK-1", "price": 10.0}
    [submit] = provider.submits()
    job_id = submit["job_id"]
    # every poll found the job id in the store already: a crash after the submit's answer loses nothing
    assert recorded_at_poll == [job_id] * 3
    [job] = setup.store.provider_jobs("shop", "p1")
    assert (job.state, job.job_id, job.cost, job.polls) == (ProviderJobState.DONE, job_id, 0.01, 3)
    output = _candidate_output(single)
    assert (output["provider_job"], output["provider_cost"], output["provider_polls"]) == (job_id, 0.01, 3)

    # the batch path: the same fetch interface, one job per target, the run's spend in its summary
    batch = setup.run_batch("shop", ["p2", "p3"])
    assert batch.success
    assert {k: setup.store.latest_accepted("shop", k).record["title"] for k in ("p2", "p3")} == {
        "p2": "Emma", "p3": "Ulysses"}
    submitted = sorted(s["url"] for s in provider.submits())
    assert submitted == sorted(setup.site.url(f"/p/{i}") for i in (1, 2, 3))
    summary = batch_summary(batch)
    assert (summary["provider_jobs"], summary["provider_spend"]) == (2, 0.02)
    for run in (single, batch):  # the token is in no event, log line or message
        assert TOKEN not in setup.events_text(run.run_id)


def test_polls_that_time_out_twice_then_answer_are_one_job_never_a_second_submit(
        provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    setup.write("shop", {"p1": setup.site.url("/p/1")}, timeout_s=0.5, retries=2)
    provider.stall_polls = 2  # the first two polls get no answer: the client's timeout fires on each

    result = setup.run_single("shop", "p1")
    assert result.success, failure_text(result)
    [submit] = provider.submits()
    polls = provider.polls(submit["job_id"])
    assert [p["stalled"] for p in polls] == [True, True, False]
    assert setup.store.latest_accepted("shop", "p1").record["title"] == "Dune"
    [job] = setup.store.provider_jobs("shop")
    assert job.state == ProviderJobState.DONE and job.job_id == submit["job_id"]


def test_a_run_that_gives_up_polling_is_resumed_by_the_next_run_with_the_same_job(
        provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    setup.write("shop", {"p1": setup.site.url("/p/1")}, deadline_s=1)
    provider.polls_until_done = 10_000  # a slow job: still running when the run's deadline passes

    first = setup.run_single("shop", "p1")
    assert not first.success
    assert "is still running" in failure_text(first) and "the next run polls it again" in failure_text(first)
    [job] = setup.store.provider_jobs("shop")
    assert job.state == ProviderJobState.SUBMITTED and job.job_id is not None

    provider.polls_until_done = 1
    second = setup.run_single("shop", "p1")
    assert second.success, failure_text(second)
    assert [s["job_id"] for s in provider.submits()] == [job.job_id]  # polled again, never submitted again
    assert setup.store.latest_accepted("shop", "p1").record["title"] == "Dune"
    [done] = setup.store.provider_jobs("shop")
    assert done.state == ProviderJobState.DONE and done.polls > job.polls


@pytest.mark.parametrize("provider_setup", ["sqlite", "postgres"], indirect=True)
def test_a_spent_budget_pauses_the_contract_with_the_reason_and_submits_nothing(
        provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    urls = {f"p{i}": setup.site.url(f"/p/{i}") for i in range(1, 5)}
    for i in range(1, 5):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    # one lane: the targets go one after another, so the budget stops the batch at a known target
    setup.write("shop", urls, concurrency=1, budget={"amount": 0.02, "per": "day", "currency": "EUR"})

    first = setup.run_batch("shop")
    assert first.success
    assert len(provider.submits()) == 2
    summary = batch_summary(first)
    spend = (summary["provider_jobs"], summary["provider_spend"], summary["provider_currency"])
    assert spend == (2, 0.02, "EUR")
    refused = {f["partition"]: f["reason"] for f in summary["failures"]}
    assert sorted(refused) == ["p3", "p4"]
    assert all("cost budget spent: 0.02 of 0.02 EUR spent today (UTC)" in r for r in refused.values())

    second = setup.run_batch("shop")  # the next sweep the same day: paused, every target skipped with why
    assert second.success
    assert len(provider.submits()) == 2
    skipped = batch_summary(second)["skipped"]
    assert {s["partition"] for s in skipped} == set(urls)
    assert all(s["reason"].startswith("contract paused: cost budget spent: 0.02 of 0.02 EUR")
               for s in skipped)
    [paused] = [e for e in setup.instance.fetch_observations(accepted_key("shop"), limit=10).records
                if "paused" in e.asset_observation.metadata]
    assert paused.asset_observation.metadata["paused"].value.startswith("cost budget spent")

    single = setup.run_single("shop", "p4")  # a Materialize from the UI: refused with the reason, no job
    assert not single.success and "cost budget spent" in failure_text(single)
    assert len(provider.submits()) == 2

    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.service.health import contract_health

    [health] = contract_health(setup.store, load_contracts(setup.contracts_dir).contracts)
    assert health.provider_spend_today == 0.02
    assert health.budget_paused.startswith("cost budget spent: 0.02 of 0.02 EUR")


def test_a_budget_per_sweep_is_spent_per_launch(provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    urls = {f"p{i}": setup.site.url(f"/p/{i}") for i in range(1, 4)}
    for i in range(1, 4):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    setup.write("shop", urls, concurrency=1, budget={"amount": 0.02, "per": "sweep"})
    # two batched runs of one launch (one idempotency key) share the sweep's budget
    first = setup.run_batch("shop", ["p1", "p2"], tags={"scrape_contracts/idempotency_key": "sweep-a"})
    second = setup.run_batch("shop", ["p3"], tags={"scrape_contracts/idempotency_key": "sweep-a"})
    assert first.success and second.success
    assert len(provider.submits()) == 2
    assert batch_summary(second)["skipped"][0]["reason"].startswith(
        "contract paused: cost budget spent: 0.02 of 0.02 USD spent in this sweep")
    # a new sweep
    third = setup.run_batch("shop", ["p3"], tags={"scrape_contracts/idempotency_key": "sweep-b"})
    assert third.success and len(provider.submits()) == 3
    assert setup.store.latest_accepted("shop", "p3").record["title"] == "Book 3"


def _check_evaluations(setup: ProviderSetup, run_id: str) -> dict[str, bool]:
    return {e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data.passed
            for e in setup.instance.all_logs(run_id) if e.dagster_event
            and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"}


@pytest.mark.parametrize("provider_setup", ["sqlite", "postgres"], indirect=True)
def test_sigkill_between_the_submit_and_its_job_id_is_indeterminate_until_the_job_is_adopted(
        provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str]) -> None:
    from scrape_contracts.cli import main
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.service.health import contract_health

    setup, provider, store = provider_setup, provider_setup.provider, provider_setup.store
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    # the held submit waits, never timed out
    setup.write("shop", {"p1": setup.site.url("/p/1")}, timeout_s=120, deadline_s=240)
    held = provider.hold_next_submit()  # the provider makes the job and keeps its answer: the kill window
    worker = setup.start_worker("shop", "p1")
    try:
        provider.wait_for("the run worker's submit",
                          lambda: held.created.is_set() or worker.poll() is not None)
        assert worker.poll() is None, "the run worker ended before its submit"
        os.killpg(worker.pid, signal.SIGKILL)  # after the provider made the job, before its id was recorded
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=60)
    held.release()
    [marker] = store.provider_jobs("shop", "p1")
    assert (marker.state, marker.job_id) == (ProviderJobState.SUBMITTING, None)
    # the killed run still holds the target's lease: the instance learns it died, as run monitoring tells it
    setup.instance.report_run_failed(setup.instance.get_run_by_id(marker.run_id))

    rerun = setup.run_single("shop", "p1")
    assert not rerun.success
    assert "indeterminate: a submit for it went out and its answer, the job id, was never recorded" in \
        failure_text(rerun)
    assert len(provider.submits()) == 1  # a re-run does not submit again
    state = store.state("shop", "p1")
    assert state.paused and state.pause_reason.startswith("indeterminate: ")
    assert f"scrape-contracts reconcile shop p1 --job-id ID" in state.pause_reason
    # the UI: the target's data says it is paused and why
    [latest] = setup.instance.fetch_observations(dg.AssetRecordsFilter(
        asset_key=accepted_key("shop"), asset_partitions=["p1"]), limit=1).records
    assert latest.asset_observation.metadata["paused"].value == state.pause_reason
    [health] = contract_health(store, load_contracts(setup.contracts_dir).contracts)
    assert health.indeterminate == 1 and health.paused == 1
    batch = setup.run_batch("shop")  # schedules and batches skip it
    assert batch.success and batch_summary(batch)["skipped"][0]["reason"] == state.pause_reason
    assert len(provider.submits()) == 1

    # the job the provider did run, found by its label, adopted: the scrape polls it, its page is checked
    [listed] = [j for j in provider.list_jobs("shop/p1")]
    assert listed["job_id"] == held.job_id
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$12.00"))
    code = main(["--contracts-dir", str(setup.contracts_dir), "reconcile", "shop", "p1",
                 "--job-id", held.job_id, "--by", "alice",
                 "--reason", "found it in the provider's dashboard"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"shop/p1: adopted provider job {held.job_id}" in out and "accepted as v1" in out
    assert len(provider.submits()) == 1 and provider.polls(held.job_id)
    assert store.latest_accepted("shop", "p1").record == {"title": "Dune", "sku": "BK-1", "price": 12.0}
    [job] = store.provider_jobs("shop", "p1")
    assert (job.state, job.job_id) == (ProviderJobState.DONE, held.job_id)
    assert job.note == f"adopted job {held.job_id} by alice: found it in the provider's dashboard"
    scrape_run = store.latest_accepted("shop", "p1").run_id
    checks = _check_evaluations(setup, scrape_run)
    assert checks and all(checks.values()), checks  # the blocking checks ran on the adopted job's data
    assert not store.state("shop", "p1").paused
    assert TOKEN not in setup.events_text(rerun.run_id) + setup.events_text(scrape_run)


def test_a_lost_submit_answer_is_indeterminate_a_wrong_job_id_is_refused_and_resubmit_submits_once(
        provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str]) -> None:
    from scrape_contracts.cli import main

    setup, provider, store = provider_setup, provider_setup.provider, provider_setup.store
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    setup.write("shop", {"p1": setup.site.url("/p/1")})
    assert setup.run_single("shop", "p1").success
    provider.lose_submits = 1  # the provider makes the job and the connection closes before its answer
    first = setup.run_single("shop", "p1")
    assert not first.success and "indeterminate: the submit's answer was lost" in failure_text(first)
    assert len(provider.submits()) == 2

    argv = ["--contracts-dir", str(setup.contracts_dir), "reconcile", "shop", "p1", "--by", "bob"]
    assert main([*argv, "--job-id", "job-999999"]) == 1
    assert "the provider knows no job 'job-999999'" in capsys.readouterr().err
    assert store.state("shop", "p1").paused  # nothing changed
    # the provider says it has none (in this story): resubmit; the new job's page breaks a rule
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "-$5.00"))  # below the rule min: 0
    code = main([*argv, "--resubmit", "--reason", "no such job at the provider"])
    out = capsys.readouterr().out
    assert len(provider.submits()) == 3
    assert code == 1 and "rejected by the contract's checks" in out, out
    assert store.latest_accepted("shop", "p1").record["price"] == 10.0  # the last accepted data stays
    assert main([*argv, "--resubmit"]) == 1  # nothing left to reconcile
    assert "nothing to reconcile for shop/p1" in capsys.readouterr().err


def test_a_lost_answer_in_a_batch_pauses_that_target_only_and_says_so_on_its_partition(
        provider_setup: ProviderSetup) -> None:
    setup, provider, store = provider_setup, provider_setup.provider, provider_setup.store
    for i in (1, 2):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    setup.write("shop", {f"p{i}": setup.site.url(f"/p/{i}") for i in (1, 2)}, concurrency=1)
    provider.lose_submits = 1  # the batch's first submit (p1, one lane in key order)

    batch = setup.run_batch("shop")
    assert batch.success  # a batch ends green with per-target failures
    [failure] = batch_summary(batch)["failures"]
    assert failure["partition"] == "p1" and "indeterminate: the submit's answer was lost" in failure["reason"]
    assert store.latest_accepted("shop", "p2").record["title"] == "Book 2"
    reason = store.state("shop", "p1").pause_reason
    assert reason.startswith("indeterminate: ")
    [latest] = setup.instance.fetch_observations(dg.AssetRecordsFilter(
        asset_key=accepted_key("shop"), asset_partitions=["p1"]), limit=1).records
    assert latest.asset_observation.metadata["paused"].value == reason
    again = setup.run_batch("shop")
    assert again.success and len(provider.submits()) == 3  # p1 skipped (paused), p2 scraped again
    assert {s["partition"]: s["reason"] for s in batch_summary(again)["skipped"]} == {"p1": reason}
