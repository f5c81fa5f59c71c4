"""Activations end to end: real instance, real site and a real receiver on 127.0.0.1 (issue 11)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from scrape_contracts.adapters.destinations import verify
from scrape_contracts.adapters.outbox import event_id
from scrape_contracts.adapters.statuses import DeliveryState, OutboxKind
from scrape_contracts.cli import main
from scrape_contracts_tests.conftest import HOOK_SECRET, Harness, product_page
from scrape_contracts_tests.receiver import Receiver

RULES = """
activations:
  - name: price_drop
    when: {{field: price, decreased_by_more_than: 10%}}
    notify: [hook]
    payload: [title, price]
  - name: trouble
    on: [quarantined, paused]
    notify: [hook]
"""


def _setup(harness: Harness, site: Any, receiver: Receiver) -> None:
    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")}, extra=RULES.format())
    harness.write_hook_destination(receiver)


def _tick(harness: Harness, defs: dg.Definitions, cursor: str | None) -> dg.SensorResult:
    sensor = defs.get_sensor_def("activation_sensor")
    with dg.build_sensor_context(instance=harness.instance, cursor=cursor, resources=defs.resources) as context:
        return sensor(context)


def _deliver(harness: Harness, defs: dg.Definitions, request: dg.RunRequest, **config: Any
             ) -> dg.ExecuteInProcessResult:
    run_config = request.run_config
    if config:
        run_config = {"ops": {"deliver_events": {"config": {
            **run_config["ops"]["deliver_events"]["config"], **config}}}}
    return defs.resolve_job_def("deliver_events_job").execute_in_process(
        run_config=run_config, instance=harness.instance, raise_on_error=False, tags=request.tags)


def test_a_price_drop_fires_its_rule_once_signed_and_a_formatting_change_fires_nothing(
        harness: Harness, site: Any, receiver: Receiver) -> None:
    _setup(harness, site, receiver)
    defs = harness.definitions()
    assert harness.run("shop", "p1", defs).success  # version 1: nothing to compare with
    first = _tick(harness, defs, None)
    cursor = first.cursor
    for request in first.run_requests or []:
        assert _deliver(harness, defs, request).success
    assert receiver.received == []

    site.set_page("/p/1", product_page("Kettle", "K-1", "$88.00"))  # -12%
    assert harness.run("shop", "p1", defs).success
    tick = _tick(harness, defs, cursor)
    (request,) = tick.run_requests
    # evaluated again over the same rows: the same run key, which Dagster launches once
    assert [r.run_key for r in _tick(harness, defs, cursor).run_requests] == [request.run_key]
    assert _deliver(harness, defs, request).success
    (got,) = receiver.received
    expected_id = event_id("shop", "p1", 2, "activation:price_drop")
    assert verify(HOOK_SECRET, got.headers, got.body) == expected_id
    body = got.json()
    assert body["rule"] == "price_drop" and body["record"] == {"title": "Kettle", "price": 88.0}
    assert "decreased by 12.0%" in body["reasons"][0]
    # the run delivered it: a second delivery run over the same rows sends nothing again
    assert _deliver(harness, defs, request).success and len(receiver.received) == 1

    site.set_page("/p/1", product_page("Kettle", "K-1", "$ 88"))  # formatting only
    assert harness.run("shop", "p1", defs).success
    later = _tick(harness, defs, tick.cursor)
    for request in later.run_requests or []:
        assert _deliver(harness, defs, request).success
    assert len(receiver.received) == 1


def test_retries_are_recorded_and_a_dead_delivery_fails_the_run_until_replayed(
        harness: Harness, site: Any, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(harness, site, receiver)
    defs = harness.definitions()
    assert harness.run("shop", "p1", defs).success
    cursor = _tick(harness, defs, None).cursor
    site.set_page("/p/1", product_page("Kettle", "K-1", "$80.00"))
    assert harness.run("shop", "p1", defs).success
    receiver.script((503, {"Retry-After": "0"}), (503, {"Retry-After": "0"}), 200)
    tick = _tick(harness, defs, cursor)
    # 2 and 4 s of backoff: real time, on purpose (the policy as it runs in production)
    assert _deliver(harness, defs, tick.run_requests[0]).success
    (delivery,) = harness.store.outbox().deliveries()
    assert delivery.status == DeliveryState.DELIVERED and [a["status"] for a in delivery.history] == [503, 503, 200]
    assert len({r.headers["x-scrape-contracts-event-id"] for r in receiver.received}) == 1

    # a quarantine routes to the same hook; the receiver refuses it: a dead delivery, a failed run
    site.set_page("/p/1", product_page("Kettle", "K-1", "$20.00"))  # -75%: beyond max_change_pct
    assert not harness.run("shop", "p1", defs).success
    assert [r.kind for r in harness.store.outbox().after(0)][-2:] == [OutboxKind.ACCEPTED, OutboxKind.QUARANTINED]
    receiver.script(400)
    bad = _tick(harness, defs, tick.cursor)
    result = _deliver(harness, defs, bad.run_requests[0])
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "dead" in failure.event_specific_data.error.message and "HTTP 400" in failure.event_specific_data.error.message
    dead = harness.store.outbox().deliveries(status=DeliveryState.DEAD)
    assert [d.rule for d in dead] == ["trouble"]
    # without replay, a dead delivery is not retried by another run over the same rows
    assert not _deliver(harness, defs, bad.run_requests[0]).success and len(receiver.received) == 4

    # the receiver is fixed: replaying sends the same message id, and it is delivered
    assert main(["--contracts-dir", str(harness.contracts_dir), "deliveries", "replay"]) == 0
    assert "delivered" in capsys.readouterr().out
    last = receiver.received[-1]
    assert verify(HOOK_SECRET, last.headers, last.body) == dead[0].message_id
    assert last.json()["kind"] == "quarantined" and "review" in last.json()["summary"]
    assert harness.store.outbox().deliveries(status=DeliveryState.DEAD) == []


def test_the_readmes_receiver_sample_verifies_a_real_delivery(receiver: Receiver) -> None:
    """The receiver code of docs/activations.md, run as written against a request our webhook destination
    sent."""
    import re
    from pathlib import Path

    from scrape_contracts.adapters.destinations import DeliveryClient, OutgoingEvent, deliver, request_for
    from scrape_contracts.contract.destinations import parse_destinations

    page = (Path(__file__).resolve().parents[2] / "docs" / "activations.md").read_text()
    block = re.search(r"<!-- receiver-sample[^>]*-->\n```python\n(.*?)```", page, re.S).group(1)
    namespace: dict[str, Any] = {}
    exec(block, namespace)  # noqa: S102 (the README's own sample)
    hook = parse_destinations({"destinations": {"hook": {"type": "webhook", "url": receiver.url,
                                                         "secret": "${HOOK_SECRET}",
                                                         "allow_private_addresses": True}}})["hook"]
    event = OutgoingEvent(id=event_id("shop", "p1", 2, "activation:price_drop"), kind="activation:price_drop",
                          contract="shop", target="p1", summary="price_drop")
    with DeliveryClient() as client:
        deliver(request_for(hook, event), client)
    got = receiver.received[0]
    assert namespace["verify"](HOOK_SECRET, got.headers, got.body) == event.id
    with pytest.raises(ValueError, match="bad signature"):
        namespace["verify"](HOOK_SECRET, got.headers, got.body + b" ")


def test_three_failures_in_a_row_alert_once_and_a_success_sends_the_recovery(
        harness: Harness, site: Any, receiver: Receiver) -> None:
    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")}, extra="""
activations:
  - name: canary
    on: [failing, recovered]
    failing_after: 3
    notify: [hook]
""")
    harness.write_hook_destination(receiver)
    defs = harness.definitions()
    assert harness.run("shop", "p1", defs).success
    site.set_page("/p/1", "gone", status=404)
    cursor = None
    sent: list[int] = []
    for _ in range(4):
        assert not harness.run("shop", "p1", defs).success
        tick = _tick(harness, defs, cursor)
        cursor = tick.cursor or cursor
        for request in tick.run_requests or []:
            assert _deliver(harness, defs, request).success
        sent.append(len(receiver.received))
    assert sent == [0, 0, 1, 1]  # the third failure alerts; the fourth does not again
    assert harness.store.state("shop", "p1").failure_streak == 4
    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    assert harness.run("shop", "p1", defs).success
    for request in _tick(harness, defs, cursor).run_requests or []:
        assert _deliver(harness, defs, request).success
    kinds = [r.json()["kind"] for r in receiver.received]
    assert kinds == ["failing", "recovered"]
    assert "3 scrapes in a row" in receiver.received[0].json()["summary"]
    assert harness.store.state("shop", "p1").failure_streak == 0


def test_health_summarises_failures_pauses_and_the_review_backlog(harness: Harness, site: Any) -> None:
    from scrape_contracts.defs.health import HEALTH_KEY

    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    site.set_page("/p/2", product_page("Mug", "M-1", "$10.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2")})
    defs = harness.definitions()
    assert harness.run("shop", "p1", defs).success and harness.run("shop", "p2", defs).success
    site.set_page("/p/1", product_page("Kettle", "K-1", "$20.00"))  # -80%: waits for review
    site.set_page("/p/2", "gone", status=404)
    assert not harness.run("shop", "p1", defs).success and not harness.run("shop", "p2", defs).success
    result = dg.materialize([defs.get_assets_def(HEALTH_KEY)], instance=harness.instance,
                            resources=defs.resources)
    assert result.success
    (materialisation,) = result.asset_materializations_for_node("scrape___health")
    (shop,) = materialisation.metadata["summary"].value
    assert (shop["contract"], shop["targets"], shop["paused"], shop["review_backlog"]) == ("shop", 2, 1, 1)
    assert (shop["failing_targets"], shop["longest_failure_streak"]) == (1, 1)
    assert shop["last_success"] is not None and 0 <= shop["age_s"] < 600 and shop["heal_budget_left"] == 6
