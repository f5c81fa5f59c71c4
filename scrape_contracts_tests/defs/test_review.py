"""Checks, quarantine, review and the event trail, on a real instance against a real HTTP site."""

from __future__ import annotations

import json

import dagster as dg

from scrape_contracts.cli import main
from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import (
    Harness, failed_checks, failure_text, materialized_keys, product_page,
)


def _shop(harness: Harness, site, price: str = "$100.00") -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", price))
    harness.write(
        "shop.yaml",
        f"""
        name: shop
        targets:
          - {{url: "{site.url('/p/1')}", key: p1, expected: {{sku: BK-1}}}}
        fetch: {{adapter: http, retries: 0, allow_private_addresses: true}}
        fields:
          title: {{selector: "#title", normalise: [lower]}}
          sku: {{selector: "#sku"}}
          price: {{selector: "#price", type: price, rules: {{min: 0, max_change_pct: 50}}}}
        schedule: {{cron: "0 6 * * *"}}
        """,
    )
    assert harness.run("shop", "p1").success


def _review_sensor_reports(harness: Harness, cursor: str | None) -> tuple[list, str | None]:
    """One tick of review_sensor and the review_notice_job run it requests (as the daemon would launch it):
    the observations that run records."""
    defs = harness.definitions()
    sensor = defs.resolve_sensor_def("review_sensor")
    with dg.build_sensor_context(instance=harness.instance, cursor=cursor,
                                 resources=defs.resources) as context:
        result = sensor(context)
    if not result.run_requests:
        assert result.skip_reason is not None and "no newly quarantined" in result.skip_reason.skip_message
        return [], result.cursor or cursor
    [request] = result.run_requests
    run = defs.resolve_job_def("review_notice_job").execute_in_process(
        run_config=request.run_config, instance=harness.instance, tags=request.tags)
    assert run.success
    events = [e.event_specific_data.asset_observation for e in run.all_events if e.is_asset_observation]
    return events, result.cursor


def test_small_change_accepted_big_change_quarantined_then_accepted(harness: Harness, site) -> None:
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$110.00"))
    result = harness.run("shop", "p1")
    assert result.success and harness.accepted("shop", "p1")["price"] == 110.0

    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    result = harness.run("shop", "p1")
    assert not result.success
    failed = failed_checks(result)
    assert set(failed) == {"change_within_limit"}
    assert (failed["change_within_limit"]["old"], failed["change_within_limit"]["new"]) == ("110.0", "900.0")
    assert failed["change_within_limit"]["field"] == "price"
    assert "scrape/shop" not in materialized_keys(result)
    assert harness.accepted("shop", "p1")["price"] == 110.0
    store = harness.store
    pending = store.pending_review("shop", "p1")
    assert pending is not None and pending.record["price"] == 900.0
    assert store.state("shop", "p1").paused

    # the review sensor reports the quarantine exactly once across evaluations
    events, cursor = _review_sensor_reports(harness, None)
    assert [(e.partition, e.metadata["stage"].value) for e in events] == [("p1", "review_announced")]
    assert "110.0 → 900.0" in str(events[0].metadata["reasons"].value)
    assert "110.0 → 900.0" in events[0].description
    assert events[0].metadata["review"].value.startswith("scrape-contracts review accept|reject shop p1")
    again, cursor = _review_sensor_reports(harness, cursor)
    assert again == []

    review = harness.review("shop", "p1", "accept", reviewer="alice", reason="publisher confirmed")
    assert review.success
    [materialization] = review.get_asset_materialization_events()
    metadata = materialization.event_specific_data.materialization.metadata
    assert metadata["reviewer"].value == "alice" and metadata["reason"].value == "publisher confirmed"
    latest = store.latest_accepted("shop", "p1")
    assert (latest.record["price"], latest.source, latest.reviewer) == (900.0, "review", "alice")
    assert not store.state("shop", "p1").paused
    # deciding again: nothing is quarantined any more
    again = harness.review("shop", "p1", "reject")
    assert not again.success
    assert "nothing quarantined" in failure_text(again)


def test_review_sensor_reads_quarantines_from_the_outbox(sqlite_harness: Harness, site) -> None:
    """The sensor follows the outbox's `quarantined` rows (the ones destinations get too): a quarantine decided
    before the tick is not announced, a new one is, once; a cursor from before the outbox skips nothing new."""
    harness = sqlite_harness
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    assert not harness.run("shop", "p1").success
    assert harness.review("shop", "p1", "reject").success
    events, cursor = _review_sensor_reports(harness, None)
    assert events == [] and cursor is not None  # decided already: nothing to announce, the cursor moves
    site.set_page("/p/1", product_page("Dune", "BK-1", "$950.00"))
    assert not harness.run("shop", "p1").success
    waiting = harness.store.pending_review("shop", "p1")
    (quarantined,) = [r for r in harness.store.outbox().after(0) if r.version == waiting.id]
    assert quarantined.kind == "quarantined" and quarantined.data["candidate_id"] == waiting.id
    events, later = _review_sensor_reports(harness, cursor)
    assert [e.metadata["candidate_id"].value for e in events] == [waiting.id]
    assert _review_sensor_reports(harness, later)[0] == []
    # a cursor saved by the sensor before it read the outbox (a candidate id): already announced stays so
    legacy = json.dumps({"after_id": waiting.id})
    assert _review_sensor_reports(harness, legacy)[0] == []
    assert len(_review_sensor_reports(harness, json.dumps({"after_id": waiting.id - 1}))[0]) == 1


def test_reject_keeps_previous_and_stale_decisions_are_refused(harness: Harness, site, capsys) -> None:
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    assert not harness.run("shop", "p1").success
    first = harness.store.pending_review("shop", "p1")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$950.00"))
    assert not harness.run("shop", "p1").success  # a newer quarantined candidate supersedes the first
    stale = harness.review("shop", "p1", "accept", candidate_id=first.id)
    assert not stale.success
    assert "superseded" in failure_text(stale)

    code = main(["--contracts-dir", str(harness.contracts_dir), "review", "reject", "shop", "p1",
                 "--reviewer", "bob", "--reason", "scraping glitch"])
    assert code == 0
    assert harness.accepted("shop", "p1")["price"] == 100.0
    assert not harness.store.state("shop", "p1").paused
    assert main(["--contracts-dir", str(harness.contracts_dir), "review", "accept", "shop", "p1",
                 "--reviewer", "bob", "--reason", "again"]) == 1
    assert "nothing quarantined" in capsys.readouterr().err


def test_formatting_only_change_is_unchanged(harness: Harness, site) -> None:
    _shop(harness, site)
    site.set_page("/p/1", product_page("  DUNE ", "BK-1", "100.00 $"))  # case, spaces, symbol placement
    result = harness.run("shop", "p1")
    assert result.success
    candidate = harness.store.latest_candidate("shop", "p1", run_id=result.run_id)
    assert candidate.outcome == "unchanged"
    assert harness.store.latest_accepted("shop", "p1").version == 1  # no new version for the same data


def test_expected_sku_and_negative_price_fail_with_clear_metadata(harness: Harness, site) -> None:
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-9", "$100.00"))
    failed = failed_checks(harness.run("shop", "p1"))
    assert failed["sku_matches_expected"]["field"] == "sku"
    assert failed["sku_matches_expected"]["new"] == '"BK-9"' and failed["sku_matches_expected"]["old"] == '"BK-1"'
    site.set_page("/p/1", product_page("Dune", "BK-1", "-$5.00"))
    failed = failed_checks(harness.run("shop", "p1"))
    assert "below the minimum 0" in failed["price_within_bounds"]["message"]
    assert harness.accepted("shop", "p1")["price"] == 100.0
    assert harness.store.pending_review("shop", "p1") is None  # rejected outright, not queued for review


def test_schedule_skips_paused_and_run_keys_are_stable(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    _shop(harness, site)
    site.set_page("/p/2", product_page("Emma", "BK-2", "$10.00"))
    path = harness.contracts_dir / "shop.yaml"
    path.write_text(path.read_text().replace("expected: {sku: BK-1}}", f"expected: {{sku: BK-1}}}}\n"
                                             f"  - {{url: \"{site.url('/p/2')}\", key: p2}}"))
    defs = harness.definitions()
    schedule = defs.resolve_schedule_def("scrape_shop_schedule")
    import datetime as dt

    tick = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.timezone.utc)

    def evaluate() -> list[dg.RunRequest] | dg.SkipReason:
        with dg.build_schedule_context(instance=harness.instance, scheduled_execution_time=tick,
                                       resources=defs.resources, repository_def=defs.get_repository_def()) as context:
            data = schedule.evaluate_tick(context)
            return data.run_requests or data.skip_message

    def targets(requests: list[dg.RunRequest]) -> list[str]:
        return [key for r in requests for key in r.run_config["ops"]["shop_scrape_batch"]["config"]["partitions"]]

    first = evaluate()
    assert len(first) == 1 and first[0].job_name in (None, "scrape_shop_batch_job")  # one batched run
    assert sorted(targets(first)) == ["p1", "p2"]
    assert [r.run_key for r in first] == [r.run_key for r in evaluate()]  # re-evaluation: same keys
    harness.store.update_state("shop", "p1", paused=True, pause_reason="review required: price jump")
    assert targets(evaluate()) == ["p2"]
    harness.store.update_state("shop", "p2", paused=True, pause_reason="healing budget exhausted")
    skip = evaluate()
    assert "every target of shop is paused" in skip and "price jump" in skip and "budget" in skip
    assert main(["--contracts-dir", str(harness.contracts_dir), "resume", "shop", "p1"]) == 0
    assert targets(evaluate()) == ["p1"]
    # a contract larger than its batch_size is scraped as several runs
    path.write_text(path.read_text() + "\nbatch_size: 1\n")
    defs = harness.definitions()
    schedule = defs.resolve_schedule_def("scrape_shop_schedule")
    harness.store.resume("shop", "p2")
    assert [targets([r]) for r in evaluate()] == [["p1"], ["p2"]]


def test_events_trail_and_cursor(sqlite_harness: Harness, site, capsys) -> None:
    harness = sqlite_harness
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    harness.run("shop", "p1")
    _review_sensor_reports(harness, None)
    harness.review("shop", "p1", "accept", reviewer="carol", reason="confirmed")
    events, cursor = read_trail(harness.instance, "shop", partition="p1")
    stages = [e.stage for e in events]
    for stage in ("fetched", "extracted", "violation_found", "change_detected", "candidate_stored",
                  "check_failed", "quarantined", "reviewed", "accepted"):
        assert stage in stages, (stage, stages)
    assert stages.index("violation_found") < stages.index("quarantined") < stages.index("reviewed")
    assert [e.storage_id for e in events] == sorted(e.storage_id for e in events)
    assert any(e.stage == "check_failed" and "change_within_limit FAILED" in e.summary for e in events)
    assert len({e.run_id for e in events if e.stage in ("violation_found", "check_failed", "quarantined")}) == 1

    assert main(["--contracts-dir", str(harness.contracts_dir), "events", "shop", "--partition", "p1",
                 "--limit", "5"]) == 0
    out = capsys.readouterr().out
    page_cursor = int(out.strip().splitlines()[-1].split()[1])
    assert len(out.strip().splitlines()) == 6
    assert main(["--contracts-dir", str(harness.contracts_dir), "events", "shop", "--partition", "p1",
                 "--after", str(page_cursor)]) == 0
    rest = capsys.readouterr().out.strip().splitlines()[:-1]
    assert [int(line.split()[0]) for line in rest] == [e.storage_id for e in events if e.storage_id > page_cursor]
    site.set_page("/p/1", product_page("Dune", "BK-1", "$905.00"))
    last = harness.run("shop", "p1")
    assert last.success, failure_text(last)
    newer, _ = read_trail(harness.instance, "shop", partition="p1", after=cursor)
    assert newer and all(e.storage_id > cursor for e in newer)
