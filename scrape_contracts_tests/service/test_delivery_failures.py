"""At-least-once delivery when the receiver is down, and when the sender is killed mid-delivery (issue 11)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.destinations import DeliveryPolicy, load_destinations
from scrape_contracts.adapters.statuses import DeliveryState
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.service.activations import deliver_rows
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.receiver import Receiver

RULES = """
activations:
  - name: any_change
    when: {field: price, changed: true}
    notify: [hook]
"""
FAST = DeliveryPolicy(timeout_s=5, backoff_s=(0.05,))


def _changes(harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch, url: str, targets: int = 3) -> None:
    monkeypatch.setenv("HOOK_SECRET", "s")
    monkeypatch.setenv("HOOK_URL", url)
    pages = {f"p{i}": f"/p/{i}" for i in range(targets)}
    for key, path in pages.items():
        site.set_page(path, product_page(key, key, "$100.00"))
    harness.write_product_contract("shop", {k: site.url(p) for k, p in pages.items()}, extra=RULES)
    harness.write("destinations.yaml", """
        destinations:
          hook: {type: webhook, url: "${HOOK_URL}", secret: "${HOOK_SECRET}", allow_private_addresses: true}
        """)
    defs = harness.definitions()
    for price in ("$100.00", "$110.00", "$120.00"):
        for key, path in pages.items():
            site.set_page(path, product_page(key, key, price))
            assert harness.run("shop", key, defs).success


def _deliver(harness: Harness, **kwargs: Any) -> list:
    store = harness.store
    return deliver_rows(store, store.outbox().after(0), load_contracts(harness.contracts_dir).by_name(),
                        load_destinations(harness.contracts_dir), policy=FAST, **kwargs)


@pytest.mark.slow
def test_a_receiver_down_for_the_whole_window_gets_everything_once_on_replay(
        sqlite_harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    down = Receiver()
    url = down.url
    down.close()  # nothing listens: every attempt of the first window fails
    _changes(sqlite_harness, site, monkeypatch, url)
    first = _deliver(sqlite_harness)
    assert len(first) == 6 and all(s.status == DeliveryState.DEAD for s in first)  # 3 targets x 2 changes
    assert all(len(s.attempts) == 3 for s in first)
    with Receiver() as receiver:
        monkeypatch.setenv("HOOK_URL", receiver.url)
        assert [s.status for s in _deliver(sqlite_harness)] == [DeliveryState.DEAD] * 6  # dead stays dead...
        assert receiver.received == []
        replayed = _deliver(sqlite_harness, replay=True)  # ...until replayed
        assert all(s.status == DeliveryState.DELIVERED for s in replayed)
        ids = [r.headers["x-scrape-contracts-event-id"] for r in receiver.received]
        assert sorted(ids) == sorted(s.message.event.id for s in first)  # no loss, no duplicate
        _deliver(sqlite_harness, replay=True)
        assert len(receiver.received) == 6


def _deliver_in_child(db_url: str, contracts_dir: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    from scrape_contracts.adapters.store import ProjectStore

    store = ProjectStore(db_url)
    deliver_rows(store, store.outbox().after(0), load_contracts(contracts_dir).by_name(),
                 load_destinations(Path(contracts_dir)), policy=FAST)


def test_a_sender_killed_mid_delivery_delivers_after_restart_with_the_same_id(
        sqlite_harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver() as receiver:
        _changes(sqlite_harness, site, monkeypatch, receiver.url, targets=1)
        receiver.script((200, {}))
        receiver.hold_seconds = 30  # the receiver takes the request and does not answer yet
        env = {k: v for k, v in os.environ.items() if k.startswith(("HOOK_", "SCRAPE_CONTRACTS_"))}
        child = multiprocessing.get_context("spawn").Process(
            target=_deliver_in_child, args=(sqlite_harness.backend.db_url, str(sqlite_harness.contracts_dir), env))
        child.start()
        deadline = time.monotonic() + 60
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert receiver.received, "the child never sent"
        os.kill(child.pid, signal.SIGKILL)  # between the send and recording its result
        child.join(10)
        assert sqlite_harness.store.outbox().deliveries() == []  # nothing recorded: it is still to be sent
        receiver.hold_seconds = 0
        after = _deliver(sqlite_harness)
    assert [s.status for s in after] == [DeliveryState.DELIVERED, DeliveryState.DELIVERED]
    ids = [r.headers["x-scrape-contracts-event-id"] for r in receiver.received]
    # at least once: the request the killed sender made came again with the same id; by id, exactly once
    assert ids[0] in ids[1:] and len(set(ids)) == 2
