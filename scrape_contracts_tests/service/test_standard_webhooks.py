"""Standard Webhooks signing, verified by the ``standardwebhooks`` library (not our code) at a real receiver:
a normal delivery, a retry and a replay, all deduplicated by ``webhook-id`` (issue 26)."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from scrape_contracts.adapters.destinations import (
    DeliveryClient, DeliveryPolicy, OutgoingEvent, deliver, load_destinations, request_for,
)
from scrape_contracts.contract.destinations import parse_destinations
from scrape_contracts.adapters.outbox import event_id
from scrape_contracts.adapters.statuses import DeliveryState
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.service.activations import deliver_rows
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.readme import REPO, blocks_run_by, python_sample, run_blocks
from scrape_contracts_tests.receiver import Received, Receiver

DOCS = REPO / "docs" / "webhook-verification.md"

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
RULES = """
activations:
  - name: any_change
    when: {field: price, changed: true}
    notify: [hook]
"""
FAST = DeliveryPolicy(timeout_s=5, backoff_s=(0.05,))


class Consumer:
    """What a team's endpoint does: verify with the library (401 otherwise), process each webhook-id once."""

    def __init__(self, secret: str) -> None:
        self.webhook = Webhook(secret)
        self.processed: dict[str, Any] = {}
        self.refused = 0
        self._lock = threading.Lock()

    def __call__(self, got: Received) -> int | None:
        try:
            payload = self.webhook.verify(got.body, got.headers)
        except WebhookVerificationError:
            with self._lock:
                self.refused += 1
            return 401
        with self._lock:
            self.processed.setdefault(got.headers["webhook-id"], payload)
        return None  # the scripted answer (a 503 stands for the consumer's own outage)


def _setup(harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch, receiver: Receiver, secret: str) -> None:
    monkeypatch.setenv("SW_SECRET", secret)
    site.set_page("/p/1", product_page("Kettle", "K-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")}, extra=RULES)
    harness.write("destinations.yaml", f"""
        destinations:
          hook: {{type: webhook, url: "{receiver.url}/hook", secret: "${{SW_SECRET}}", signing: standard-webhooks,
                 allow_private_addresses: true}}
        """)


def _change(harness: Harness, site: Any, price: str) -> None:
    site.set_page("/p/1", product_page("Kettle", "K-1", price))
    assert harness.run("shop", "p1").success


def _deliver(harness: Harness, **kwargs: Any) -> list:
    store = harness.store
    return deliver_rows(store, store.outbox().after(0), load_contracts(harness.contracts_dir).by_name(),
                        load_destinations(harness.contracts_dir), policy=FAST, **kwargs)


@pytest.mark.slow  # four scrape runs
def test_deliveries_verify_with_the_library_and_keep_their_webhook_id_across_retries_and_replays(
        sqlite_harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = Consumer(SECRET)
    with Receiver(check=consumer) as receiver:
        _setup(sqlite_harness, site, monkeypatch, receiver, SECRET)
        _change(sqlite_harness, site, "$100.00")
        _change(sqlite_harness, site, "$110.00")  # version 2: a normal delivery
        (normal,) = _deliver(sqlite_harness)
        assert normal.status == DeliveryState.DELIVERED and len(normal.attempts) == 1
        first_id = event_id("shop", "p1", 2, "activation:any_change")
        assert receiver.received[0].headers["webhook-id"] == first_id  # the outbox message id

        _change(sqlite_harness, site, "$120.00")  # version 3: the consumer is down once, then back
        receiver.script(503, 200)
        retried = [s for s in _deliver(sqlite_harness) if not s.skipped]
        assert [a["status"] for a in retried[0].attempts] == [503, 200]

        _change(sqlite_harness, site, "$130.00")  # version 4: down for every attempt, then replayed
        receiver.script(503, 503, 503)
        dead = [s for s in _deliver(sqlite_harness) if not s.skipped]
        assert dead[0].status == DeliveryState.DEAD
        replayed = [s for s in _deliver(sqlite_harness, replay=True) if not s.skipped]
        assert [s.status for s in replayed] == [DeliveryState.DELIVERED]

    ids = [r.headers["webhook-id"] for r in receiver.received]
    # 1 + 2 + (3 + 1) requests, three messages: retries and the replay carry the id of their message
    assert ids == [first_id] + [event_id("shop", "p1", 3, "activation:any_change")] * 2 + \
        [event_id("shop", "p1", 4, "activation:any_change")] * 4
    assert consumer.refused == 0 and list(consumer.processed) == list(dict.fromkeys(ids))
    assert consumer.processed[first_id]["version"] == 2 and consumer.processed[first_id]["record"]["price"] == 110
    # the replay was signed anew (a later timestamp), and still verifies
    assert int(receiver.received[-1].headers["webhook-timestamp"]) >= int(receiver.received[-2].headers[
        "webhook-timestamp"])
    # and the library is not just saying yes: another secret, or a changed body, does not verify
    other = Webhook("whsec_" + base64.b64encode(bytes(32)).decode())
    for webhook, body in ((other, receiver.received[0].body), (Webhook(SECRET), receiver.received[0].body + b" ")):
        with pytest.raises(WebhookVerificationError):
            webhook.verify(body, receiver.received[0].headers)


def test_a_secret_that_is_not_whsec_base64_fails_the_delivery_saying_what_a_secret_looks_like(
        sqlite_harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver() as receiver:
        _setup(sqlite_harness, site, monkeypatch, receiver, "not-base64!")
        _change(sqlite_harness, site, "$100.00")
        _change(sqlite_harness, site, "$110.00")
        (sent,) = _deliver(sqlite_harness)
    assert sent.status == DeliveryState.DEAD and receiver.received == []
    assert "whsec_ followed by the base64" in sent.reason


def test_the_docs_secret_and_receivers_verify_real_deliveries_in_both_schemes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/webhook-verification.md as written: its secret command, and its two receivers."""
    blocks = blocks_run_by(__file__, "test_the_docs_secret_and_receivers_verify_real_deliveries_in_both_schemes")
    (made,) = run_blocks(blocks, tmp_path)
    secret = made.strip()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    monkeypatch.setenv("DOC_SECRET", secret)
    monkeypatch.setenv("DOC_PLAIN_SECRET", "plain-text-secret")
    event = OutgoingEvent(id=event_id("shop", "p1", 2, "activation:price_drop"), kind="activation:price_drop",
                          contract="shop", target="p1", summary="price_drop: -12%")
    with Receiver() as receiver, DeliveryClient() as client:
        for scheme, variable in (("standard-webhooks", "DOC_SECRET"), ("scrape-contracts", "DOC_PLAIN_SECRET")):
            hook = parse_destinations({"destinations": {"hook": {
                "type": "webhook", "url": receiver.url, "secret": f"${{{variable}}}", "signing": scheme,
                "allow_private_addresses": True}}})["hook"]
            for _ in range(2):  # the same message twice, as a retry or a replay sends it
                assert deliver(request_for(hook, event), client).status.value == "delivered"
        standard, plain = receiver.received[:2], receiver.received[2:]
    for sample, got, key in (("standard-webhooks", standard, secret), ("scrape-contracts", plain, "plain-text-secret")):
        namespace: dict[str, Any] = {}
        exec(python_sample(DOCS, sample), namespace)  # noqa: S102 (the docs' own sample)
        seen: set[str] = set()
        first = namespace["receive"](key, got[0].headers, got[0].body, seen)
        assert json.loads(first)["id"] == event.id if isinstance(first, bytes) else first["id"] == event.id
        assert namespace["receive"](key, got[1].headers, got[1].body, seen) is None  # deduplicated
        assert seen == {event.id} and got[1].headers["x-scrape-contracts-event-id"] == event.id
        with pytest.raises(Exception):
            namespace["receive"](key, got[0].headers, got[0].body + b" ", set())
