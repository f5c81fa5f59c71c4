"""Canaries: their own schedules, one alert after three failures in a row, a recovery notice after a success.

Real instance, real site and a real receiver on 127.0.0.1: the canary schedule's tick requests the batched
run, the run fails or succeeds against the site, activation_sensor reads the outbox and the delivery run
posts to the receiver, as the daemon would chain them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import dagster as dg
import pytest

from scrape_contracts.adapters.destinations import verify
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.defs.names import batch_job_name
from scrape_contracts_tests.conftest import HOOK_SECRET, Harness, product_page
from scrape_contracts_tests.receiver import Receiver

CANARY = """
canary:
  schedule: "0 */4 * * *"      # every 4 hours
  notify: [hook]
"""


def _setup(harness: Harness, site: Any, receiver: Receiver) -> None:
    for path in ("/p/1", "/p/2", "/p/3"):
        site.set_page(path, product_page("Kettle", "K-1", "$100.00"))
    harness.write("shop.yaml", f"""
        name: shop
        targets:
          - {{url: "{site.url('/p/1')}", key: p1}}
          - {{url: "{site.url('/p/2')}", key: p2, canary: false}}
          - {{url: "{site.url('/p/3')}", key: p3.x, canary: {{schedule: "*/30 * * * *"}}}}
        fetch: {{adapter: http, retries: 0, timeout_s: 5, allow_private_addresses: true}}
        fields:
          title: {{selector: "#title"}}
          price: {{selector: "#price", type: price}}
        {CANARY.strip().replace(chr(10), chr(10) + '        ')}
        """)
    harness.write_hook_destination(receiver)


def _canary_tick(harness: Harness, defs: dg.Definitions, name: str, hour: int) -> list[dg.RunRequest]:
    schedule = defs.resolve_schedule_def(name)
    tick = dt.datetime(2026, 12, 1, hour, 0, tzinfo=dt.timezone.utc)
    with dg.build_schedule_context(instance=harness.instance, scheduled_execution_time=tick,
                                   resources=defs.resources, repository_def=defs.get_repository_def()) as context:
        return schedule.evaluate_tick(context).run_requests or []


def _run_batch(harness: Harness, defs: dg.Definitions, request: dg.RunRequest) -> None:
    defs.resolve_job_def(batch_job_name("shop")).execute_in_process(
        run_config=request.run_config, instance=harness.instance, tags=request.tags, raise_on_error=False)


def _deliver_new(harness: Harness, defs: dg.Definitions, cursor: str | None) -> str | None:
    sensor = defs.resolve_sensor_def("activation_sensor")
    with dg.build_sensor_context(instance=harness.instance, cursor=cursor, resources=defs.resources) as context:
        tick = sensor(context)
    for request in tick.run_requests or []:
        assert defs.resolve_job_def("deliver_events_job").execute_in_process(
            run_config=request.run_config, instance=harness.instance, tags=request.tags).success
    return tick.cursor or cursor


def test_canary_schedules_cover_their_targets(sqlite_harness: Harness, site: Any, receiver: Receiver) -> None:
    harness = sqlite_harness
    _setup(harness, site, receiver)
    defs = harness.definitions()
    shared = defs.resolve_schedule_def("canary_shop_schedule")
    own = defs.resolve_schedule_def("canary_shop_p3_x_schedule")
    assert (shared.cron_schedule, own.cron_schedule) == ("0 */4 * * *", "*/30 * * * *")
    (request,) = _canary_tick(harness, defs, "canary_shop_schedule", 4)
    assert request.run_config["ops"]["shop_scrape_batch"]["config"]["partitions"] == ["p1"]  # p2: canary: false
    assert request.tags["scrape_contracts/trigger"] == "canary"
    assert [r.run_key for r in _canary_tick(harness, defs, "canary_shop_schedule", 4)] == [request.run_key]
    (mine,) = _canary_tick(harness, defs, "canary_shop_p3_x_schedule", 4)
    assert mine.run_config["ops"]["shop_scrape_batch"]["config"]["partitions"] == ["p3.x"]
    harness.store.pause("shop", "p1", "held by hand")
    assert _canary_tick(harness, defs, "canary_shop_schedule", 8) == []  # paused: skipped like any schedule


@pytest.mark.slow
def test_three_failed_canary_runs_alert_once_and_a_success_sends_the_recovery(
        sqlite_harness: Harness, site: Any, receiver: Receiver) -> None:
    harness = sqlite_harness
    _setup(harness, site, receiver)
    defs = harness.definitions()
    cursor = None
    (request,) = _canary_tick(harness, defs, "canary_shop_schedule", 0)
    _run_batch(harness, defs, request)
    assert harness.accepted("shop", "p1")["price"] == 100.0
    cursor = _deliver_new(harness, defs, cursor)
    site.set_page("/p/1", "gone", status=503)
    received = []
    for hour in (4, 8, 12, 16):
        (request,) = _canary_tick(harness, defs, "canary_shop_schedule", hour)
        _run_batch(harness, defs, request)
        cursor = _deliver_new(harness, defs, cursor)
        received.append(len(receiver.received))
    assert received == [0, 0, 1, 1]  # the third failed run alerts; the fourth sends nothing
    assert harness.store.state("shop", "p1").failure_streak == 4
    alert = receiver.received[0]
    assert verify(HOOK_SECRET, alert.headers, alert.body)
    body = alert.json()
    assert (body["kind"], body["rule"], body["target"]) == ("failing", "canary", "p1")
    assert body["summary"].startswith("canary failing: 3 scrapes in a row")

    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    (request,) = _canary_tick(harness, defs, "canary_shop_schedule", 20)
    _run_batch(harness, defs, request)
    cursor = _deliver_new(harness, defs, cursor)
    assert [r.json()["kind"] for r in receiver.received] == ["failing", "recovered"]
    assert "recovered after 4" in receiver.received[1].json()["summary"]
    # a new streak alerts again, once
    site.set_page("/p/1", "gone", status=503)
    for hour in (21, 22, 23):
        (request,) = _canary_tick(harness, defs, "canary_shop_schedule", hour)
        _run_batch(harness, defs, request)
        cursor = _deliver_new(harness, defs, cursor)
    assert [r.json()["kind"] for r in receiver.received] == ["failing", "recovered", "failing"]


def test_rejected_scrapes_count_and_a_quarantine_breaks_the_streak(
        sqlite_harness: Harness, site: Any, receiver: Receiver) -> None:
    """Rejected canary scrapes are failures in the row; a quarantined one read the page (the site works): it
    ends the streak, with the recovery notice when the streak had alerted, so the failures after it start a
    new row."""
    harness = sqlite_harness
    _setup(harness, site, receiver)
    shop = harness.contracts_dir / "shop.yaml"
    shop.write_text(shop.read_text().replace("type: price}", "type: price, rules: {max_change_pct: 50}}")
                    + "healing: {enabled: false}\n")
    defs = harness.definitions()
    hours = iter(range(0, 24))

    def canary_run() -> None:
        (request,) = _canary_tick(harness, defs, "canary_shop_schedule", next(hours))
        _run_batch(harness, defs, request)

    canary_run()
    cursor = _deliver_new(harness, defs, None)
    site.set_page("/p/1", product_page("Kettle", "K-1", "no price today"))  # required price missing: rejected
    for _ in range(3):
        canary_run()
        cursor = _deliver_new(harness, defs, cursor)
    assert harness.store.latest_candidate("shop", "p1").status == "rejected"
    assert [r.json()["kind"] for r in receiver.received] == ["failing"]

    site.set_page("/p/1", product_page("Kettle", "K-1", "$900.00"))  # read fine, beyond the change limit
    canary_run()
    cursor = _deliver_new(harness, defs, cursor)
    assert harness.store.latest_candidate("shop", "p1").status == "quarantined"
    assert harness.store.state("shop", "p1").failure_streak == 0
    assert [r.json()["kind"] for r in receiver.received] == ["failing", "recovered"]
    assert "recovered after 3 failed or rejected scrapes; the page was read again and waits for review" in \
        receiver.received[1].json()["summary"]

    harness.store.decide("shop", "p1", "reject", reviewer="alice", reason="glitch")  # resumes the target
    site.set_page("/p/1", product_page("Kettle", "K-1", "no price today"))
    for expected in (1, 2):
        canary_run()
        cursor = _deliver_new(harness, defs, cursor)
        assert harness.store.state("shop", "p1").failure_streak == expected  # a new row, counted from one
    assert len(receiver.received) == 2  # two in the new row: no alert yet
    canary_run()
    _deliver_new(harness, defs, cursor)
    assert [r.json()["kind"] for r in receiver.received] == ["failing", "recovered", "failing"]


@pytest.mark.parametrize(("yaml", "message"), [
    ("canary: {schedule: '0 */4 * * *'}", "canary needs notify"),
    ("canary: {notify: [hook]}", "canary needs schedule"),
    ("canary: {schedule: 'every four hours', notify: [hook]}", "invalid cron expression"),
    ("canary: {schedule: '0 * * * *', notify: [hook], failing_after: 0}", "greater than or equal to 1"),
])
def test_a_contract_canary_says_what_is_missing(tmp_path: Any, yaml: str, message: str) -> None:
    (tmp_path / "shop.yaml").write_text(f"name: shop\ntargets: [https://shop.example.com/p/1]\n"
                                        f"fields: {{title: {{selector: '#title'}}}}\n{yaml}\n")
    result = load_contracts(tmp_path)
    assert not result.contracts and message in str(result.errors[0]), result.errors


def test_a_target_canary_says_what_is_missing(tmp_path: Any) -> None:
    (tmp_path / "shop.yaml").write_text(
        "name: shop\ntargets:\n  - {url: 'https://shop.example.com/p/1', key: a, canary: true}\n"
        "  - {url: 'https://shop.example.com/p/2', key: b, canary: {schedule: '0 * * * *'}}\n"
        "fields: {title: {selector: '#title'}}\n")
    (error,) = load_contracts(tmp_path).errors
    assert "target 'a': `canary: true` takes its settings from the contract's canary:" in str(error)
    assert "target 'b': its canary needs notify" in str(error)
