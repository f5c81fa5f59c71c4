"""Destinations against a real receiver on 127.0.0.1: signatures, retries, final failures, request shapes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scrape_contracts.adapters.destinations import (
    DeliveryClient, DeliveryPolicy, DeliveryStatus, DestinationError, OutgoingEvent, SignatureError, deliver, event_id,
    load_destinations, request_for, verify,
)
from scrape_contracts.contract.destinations import parse_destinations
from scrape_contracts_tests.receiver import Receiver

SECRET = "s3cret-for-tests"
LOCAL = {"allow_private_addresses": True}  # the receiver is on 127.0.0.1


def _event(**extra: object) -> OutgoingEvent:
    base = dict(id=event_id("shop", "p1", 4, "activation:price_drop"), kind="activation:price_drop",
                contract="shop", target="p1", version=4, rule="price_drop", summary="price_drop fired",
                reasons=("price decreased by 12.0% (from 100.0 to 88.0; rule: more than 10%)",),
                record={"title": "Kettle <b>", "price": 88.0}, link="http://127.0.0.1:3000/assets/scrape/shop")
    base.update(extra)
    return OutgoingEvent(**base)  # type: ignore[arg-type]


def _destinations(receiver: Receiver) -> dict:
    return parse_destinations({"destinations": {
        "hook": {"type": "webhook", "url": receiver.url + "/hook", "secret": "${TEST_HOOK_SECRET}", **LOCAL},
        "slack": {"type": "slack", "url": "${TEST_SLACK_URL}", **LOCAL},
        "tg": {"type": "telegram", "bot_token": "${TEST_TG_TOKEN}", "chat_id": -100123, "api_url": receiver.url,
               **LOCAL},
    }})


class _Clock:
    """Injected time: waits are recorded, not slept."""

    def __init__(self) -> None:
        self.now, self.waits = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch):
    with Receiver() as receiver:
        monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
        monkeypatch.setenv("TEST_SLACK_URL", receiver.url + "/services/T000/B000/XXXX")
        monkeypatch.setenv("TEST_TG_TOKEN", "123456:ABCdef")
        yield receiver


def test_a_webhook_carries_the_event_id_and_a_signature_the_receiver_verifies(receiver: Receiver) -> None:
    event = _event()
    with DeliveryClient() as client:
        result = deliver(request_for(_destinations(receiver)["hook"], event), client)
    assert result.status is DeliveryStatus.DELIVERED and len(result.attempts) == 1
    got = receiver.received[0]
    assert got.path == "/hook" and got.json()["id"] == event.id and got.json()["record"]["price"] == 88.0
    assert verify(SECRET, got.headers, got.body) == event.id
    with pytest.raises(SignatureError, match="does not match"):
        verify("another secret", got.headers, got.body)
    with pytest.raises(SignatureError, match="does not match"):
        verify(SECRET, got.headers, got.body.replace(b"88.0", b"8.0"))
    with pytest.raises(SignatureError, match="replay"):
        verify(SECRET, got.headers, got.body, now=time.time() + 3600)


def test_503_twice_then_200_is_delivered_on_the_third_attempt_with_the_backoff(receiver: Receiver) -> None:
    receiver.script(503, (503, {"Retry-After": "7"}), 200)
    clock = _Clock()
    with DeliveryClient() as client:
        result = deliver(request_for(_destinations(receiver)["hook"], _event()), client, sleep=clock.sleep, clock=clock)
    assert result.status is DeliveryStatus.DELIVERED
    assert [a.status for a in result.attempts] == [503, 503, 200]
    assert clock.waits == [2.0, 7.0]  # backoff, then the receiver's longer Retry-After
    assert len({r.headers["x-scrape-contracts-event-id"] for r in receiver.received}) == 1


def test_a_4xx_is_final_at_once_and_every_failure_gives_up_after_three_attempts(receiver: Receiver) -> None:
    receiver.script(400)
    clock = _Clock()
    with DeliveryClient() as client:
        dead = deliver(request_for(_destinations(receiver)["hook"], _event()), client, sleep=clock.sleep, clock=clock)
        assert dead.status is DeliveryStatus.DEAD and [a.status for a in dead.attempts] == [400]
        assert "HTTP 400" in dead.reason and clock.waits == []
        receiver.script(500, 502, 504)
        dead = deliver(request_for(_destinations(receiver)["hook"], _event()), client, sleep=clock.sleep, clock=clock)
    assert [a.status for a in dead.attempts] == [500, 502, 504] and clock.waits == [2.0, 4.0]


def test_a_receiver_that_is_down_is_retried_and_the_error_shows_no_secret(receiver: Receiver) -> None:
    url = receiver.url
    receiver.close()  # nothing listens there any more
    destination = parse_destinations({"destinations": {"slack": {"type": "slack", "url": "${TEST_SLACK_URL}",
                                                                 **LOCAL}}})
    clock = _Clock()
    with DeliveryClient() as client:
        result = deliver(request_for(destination["slack"], _event()), client,
                         DeliveryPolicy(timeout_s=2), sleep=clock.sleep, clock=clock)
    assert result.status is DeliveryStatus.DEAD and len(result.attempts) == 3
    assert all(a.status is None and "ConnectError" in (a.error or "") for a in result.attempts)
    assert "XXXX" not in result.reason and url not in result.reason


def test_slack_gets_an_incoming_webhook_payload_with_a_link(receiver: Receiver) -> None:
    """Stand-in for hooks.slack.com: an incoming webhook takes a JSON POST with `text` (and optional
    `blocks` of mrkdwn sections), where links are written <url|text> and &, <, > are escaped."""
    with DeliveryClient() as client:
        assert deliver(request_for(_destinations(receiver)["slack"], _event()), client).status is DeliveryStatus.DELIVERED
    got = receiver.received[0]
    assert got.path == "/services/T000/B000/XXXX" and got.headers["content-type"] == "application/json"
    payload = got.json()
    assert payload["text"].startswith("shop/p1: ")
    block = payload["blocks"][0]
    assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
    assert "*<http://127.0.0.1:3000/assets/scrape/shop|shop/p1>*" in block["text"]["text"]
    assert "Kettle &lt;b&gt;" in block["text"]["text"]


def test_telegram_gets_send_message_in_html_parse_mode(receiver: Receiver) -> None:
    """Stand-in for api.telegram.org: POST /bot<token>/sendMessage with JSON chat_id, text, parse_mode HTML;
    in HTML mode only a few tags are allowed, so values are escaped."""
    with DeliveryClient() as client:
        assert deliver(request_for(_destinations(receiver)["tg"], _event()), client).status is DeliveryStatus.DELIVERED
    got = receiver.received[0]
    assert got.path == "/bot123456:ABCdef/sendMessage"
    payload = got.json()
    assert payload["chat_id"] == "-100123" and payload["parse_mode"] == "HTML"
    assert payload["text"].startswith("<b>shop/p1</b>: ") and "Kettle &lt;b&gt;" in payload["text"]
    assert '<a href="http://127.0.0.1:3000/assets/scrape/shop">open in Dagster</a>' in payload["text"]


def test_event_ids_are_deterministic() -> None:
    assert event_id("shop", "p1", 4, "quarantined") == event_id("shop", "p1", 4, "quarantined")
    assert event_id("shop", "p1", 4, "quarantined") != event_id("shop", "p1", 5, "quarantined")


def test_destinations_yaml_refuses_literal_secrets_and_names_a_missing_variable(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "destinations.yaml").write_text(
        "destinations:\n  hook:\n    type: webhook\n    url: https://example.invalid/h\n    secret: hunter2\n")
    with pytest.raises(DestinationError, match=r"hook.secret: .*environment reference"):
        load_destinations(tmp_path)
    (tmp_path / "destinations.yaml").write_text("destinations:\n  pager:\n    type: pager\n")
    with pytest.raises(DestinationError, match="pager"):
        load_destinations(tmp_path)
    (tmp_path / "destinations.yaml").write_text(
        "destinations:\n  hook:\n    type: webhook\n    url: https://example.invalid/h\n    secret: ${NOT_SET_X}\n")
    monkeypatch.delenv("NOT_SET_X", raising=False)
    hook = load_destinations(tmp_path)["hook"]
    with pytest.raises(DestinationError, match="NOT_SET_X is not set"):
        request_for(hook, _event())
    assert load_destinations(tmp_path / "nowhere") == {}
