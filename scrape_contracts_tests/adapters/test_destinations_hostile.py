"""Destinations against hostile places and receivers: the address guard, huge and dripping answers, secrets."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from scrape_contracts.adapters.destinations import (
    DeliveryClient, DeliveryPolicy, DeliveryStatus, DestinationError, OutgoingEvent, deliver, event_id,
    request_for,
)
from scrape_contracts.contract.destinations import parse_destinations
from scrape_contracts_tests.receiver import Receiver

LOCAL = {"allow_private_addresses": True}


def _event() -> OutgoingEvent:
    return OutgoingEvent(id=event_id("shop", "p1", 1, "quarantined"), kind="quarantined", contract="shop",
                         target="p1", summary="quarantined")


def _hook(url: str, **extra: object):
    return parse_destinations({"destinations": {"hook": {"type": "webhook", "url": url,
                                                         "secret": "${TEST_HOOK_SECRET}", **extra}}})["hook"]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_HOOK_SECRET", "s3cret")
    monkeypatch.setenv("TEST_TG_TOKEN", "123456:ABCdef")


@pytest.fixture
def elsewhere() -> Iterator[Receiver]:
    """An internal service on another loopback address, as 127.0.0.5 was in the red-team run."""
    with Receiver(host="127.0.0.5") as receiver:
        yield receiver


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def test_a_destination_on_an_internal_address_is_refused_unless_it_allows_private_addresses(
        elsewhere: Receiver) -> None:
    with DeliveryClient() as client:
        refused = deliver(request_for(_hook(elsewhere.url + "/h"), _event()), client, sleep=_Clock().sleep)
        assert refused.status is DeliveryStatus.DEAD and len(refused.attempts) == 1  # final, not retried
        assert refused.reason == ("blocked_address: webhook hook: host '127.0.0.5' is a loopback address (set "
                                  "allow_private_addresses: true on the destination if this receiver is intended)")
        assert elsewhere.received == []
        allowed = deliver(request_for(_hook(elsewhere.url + "/h", **LOCAL), _event()), client)
    assert allowed.status is DeliveryStatus.DELIVERED and len(elsewhere.received) == 1


def _slack(url: str, monkeypatch: pytest.MonkeyPatch, **extra: object):
    monkeypatch.setenv("TEST_SLACK_URL", url)  # a Slack webhook's URL comes from the environment only
    return parse_destinations({"destinations": {"team": {"type": "slack", "url": "${TEST_SLACK_URL}",
                                                         **extra}}})["team"]


@pytest.mark.parametrize("host", ["169.254.169.254", "[::ffff:169.254.169.254]", "[fd00:ec2::254]"])
@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_a_cloud_metadata_address_is_never_delivered_to(host: str, kind: str, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    url = f"http://{host}/latest"
    destination = _hook(url, **LOCAL) if kind == "webhook" else _slack(url, monkeypatch, **LOCAL)
    with DeliveryClient() as client:
        result = deliver(request_for(destination, _event()), client, sleep=_Clock().sleep)
    assert result.status is DeliveryStatus.DEAD and len(result.attempts) == 1
    name = "hook" if kind == "webhook" else "team"
    assert result.reason.startswith(f"blocked_address: {kind} {name}:") and "cloud metadata" in result.reason


def test_a_slack_destination_on_an_internal_address_is_refused(elsewhere: Receiver,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with DeliveryClient() as client:
        refused = deliver(request_for(_slack(elsewhere.url + "/services/x", monkeypatch), _event()), client,
                          sleep=_Clock().sleep)
    assert refused.status is DeliveryStatus.DEAD and "is a loopback address" in refused.reason
    assert elsewhere.received == []


def test_a_name_is_checked_after_dns_and_connected_to_at_the_address_checked(elsewhere: Receiver) -> None:
    port = elsewhere.url.rsplit(":", 1)[1]
    # a stand-in for DNS (cannot run here): the name points at the internal service
    with DeliveryClient(resolver=lambda host: ["127.0.0.5"]) as client:
        refused = deliver(request_for(_hook(f"http://hooks.example.com:{port}/h"), _event()), client)
        assert "resolves to 127.0.0.5, a loopback address" in refused.reason and elsewhere.received == []
        allowed = deliver(request_for(_hook(f"http://hooks.example.com:{port}/h", **LOCAL), _event()), client)
    assert allowed.status is DeliveryStatus.DELIVERED
    assert elsewhere.received[0].headers["host"] == f"hooks.example.com:{port}"


def test_a_telegram_api_url_must_be_https_and_is_guarded_so_the_token_goes_nowhere_else() -> None:
    def telegram(api_url: str, **extra: object):
        return parse_destinations({"destinations": {"tg": {"type": "telegram", "bot_token": "${TEST_TG_TOKEN}",
                                                           "chat_id": 1, "api_url": api_url, **extra}}})["tg"]

    for bad in ("http://attacker.example", "https://attacker.example/steal?x=", "ftp://api.telegram.org"):
        with pytest.raises(DestinationError, match=r"tg: .*api_url must be an https:// URL"):
            telegram(bad)
    assert telegram("http://127.0.0.1:9", **LOCAL).api_url == "http://127.0.0.1:9"  # a local stand-in
    with DeliveryClient() as client:
        result = deliver(request_for(telegram("https://169.254.169.254"), _event()), client)
    assert result.reason.startswith("blocked_address: telegram tg:") and "123456" not in result.reason


def test_a_50_mb_answer_is_not_read_whole() -> None:
    with Receiver() as receiver, DeliveryClient() as client:
        receiver.answer_bytes = 50_000_000
        result = deliver(request_for(_hook(receiver.url, **LOCAL), _event()), client)
        assert result.status is DeliveryStatus.DELIVERED
        _wait_for(lambda: len(receiver.written) == 1)
        # the sender hung up after its cap (64 KiB read, a few socket buffers more in flight)
        assert receiver.written[0] < 10_000_000


def test_a_receiver_dripping_its_answer_is_cut_at_the_deadline_of_each_attempt() -> None:
    with Receiver() as receiver, DeliveryClient() as client:
        receiver.answer_bytes, receiver.drip_seconds = 400, 0.25  # 100 s to answer whole, a byte every 0.25 s
        policy = DeliveryPolicy(timeout_s=1.0, max_attempts=2)  # each read comes well within timeout_s
        result = deliver(request_for(_hook(receiver.url, **LOCAL), _event()), client, policy,
                         sleep=_Clock().sleep)
        assert result.status is DeliveryStatus.DEAD and len(result.attempts) == 2
        assert all("Timeout sending to webhook hook" in (a.error or "") for a in result.attempts)
        _wait_for(lambda: len(receiver.written) == 2)
        assert all(written < 400 for written in receiver.written)


def test_env_references_in_headers_are_expanded_and_literal_secrets_refused(monkeypatch: pytest.MonkeyPatch
                                                                          ) -> None:
    monkeypatch.setenv("RT_HEADER_TOKEN", "tok-from-env")
    with Receiver() as receiver, DeliveryClient() as client:
        hook = _hook(receiver.url, headers={"Authorization": "Bearer ${RT_HEADER_TOKEN}", "X-Team": "data"},
                     **LOCAL)
        assert deliver(request_for(hook, _event()), client).status is DeliveryStatus.DELIVERED
        got = receiver.received[0].headers
    assert got["authorization"] == "Bearer tok-from-env" and got["x-team"] == "data"
    monkeypatch.delenv("RT_HEADER_TOKEN")
    with pytest.raises(DestinationError, match=r"RT_HEADER_TOKEN \(header 'Authorization' of destination hook\)"):
        request_for(hook, _event())
    with pytest.raises(DestinationError, match=r"hook.headers: .*'Authorization' carries a credential"):
        _hook("https://hooks.example.com/h", headers={"Authorization": "Bearer abc"})
    with pytest.raises(DestinationError, match=r"hook.headers: .*'X-Custom' holds what looks like a literal secret"):
        _hook("https://hooks.example.com/h", headers={"X-Custom": "sk_live_51HqLyjWDarjtT1zdp7dc"})
