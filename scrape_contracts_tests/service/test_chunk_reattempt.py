"""A chunk handed out again while its first attempt still runs (SQLite and PostgreSQL stores).

The first attempt holds the chunk's leases and commits a target after the second attempt started. The
second attempt reads what its run recorded only once it holds the leases (taken over: new fencing tokens),
so that target is counted, not scraped a second time, and the first attempt can commit nothing more.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from scrape_contracts.adapters.pages import open_pages
from scrape_contracts.adapters.store import LostLease, ProjectStore
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.defs.leases import chunk_holder
from scrape_contracts.service import gate
from scrape_contracts.service.batch import BatchRunner, BatchSettings, BatchTarget
from scrape_contracts.service.batch_leases import BatchLeases
from scrape_contracts_tests.service.test_batch_leases import result

KEYS = ("p1", "p2", "p3")
RUN = "run-1"
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def store(both_stores: ProjectStore) -> ProjectStore:
    return both_stores


def test_a_target_the_first_attempt_commits_late_is_counted_not_scraped_again(
        store: ProjectStore, tmp_path: Path) -> None:
    for key in KEYS:
        page = tmp_path / "pages" / "shop.test" / key
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<p id="price">${10 + len(key)}.00</p>')
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump({
        "name": "shop", "targets": [{"url": f"https://shop.test/{k}", "key": k} for k in KEYS],
        "fetch": {"adapter": "fixture", "fixture_dir": "pages"},
        "fields": {"price": {"selector": "#price", "type": "price"}}}))
    [loaded] = load_contracts(tmp_path).contracts
    first, second = chunk_holder(RUN, "chunk_0", "a"), chunk_holder(RUN, "chunk_0", "b")
    earlier = BatchLeases(store, "shop", first, MINUTE)
    assert earlier.take(list(KEYS)) == {}

    runner = BatchRunner(loaded, store, open_pages(str(tmp_path / "stored")), RUN, loaded.contract.fetch,
                         BatchSettings(parse_workers=0), holder=second, skip_recorded=True,
                         ended=lambda other: other == first)  # the executor gave the first attempt up
    batches = runner.run([BatchTarget(k, f"https://shop.test/{k}") for k in KEYS])
    # the first attempt, alive, commits p1 after the second one started (after the chunk step read the
    # run's records, before this runner took the leases): the window a read before the leases left open
    [(_, recorded)] = gate.record_results(earlier.fenced(["p1"]), [result("p1", 12.0)], RUN, loaded)
    assert not isinstance(recorded, LostLease)
    scraped = [outcome.partition for batch in batches for outcome in batch]

    assert sorted(scraped) == ["p2", "p3"]
    assert list(runner.earlier) == ["p1"]
    assert len([c for c in store.candidates_of_run(RUN) if c.partition == "p1"]) == 1  # one candidate
    assert [v.record for v in store.accepted_history("shop", "p1")] == [{"price": 12.0}]
    # and the first attempt can commit nothing more: its tokens are stale
    [(_, late)] = gate.record_results(earlier.fenced(["p2"]), [result("p2", 99.0)], RUN, loaded)
    assert isinstance(late, LostLease)
    assert [v.record for v in store.accepted_history("shop", "p2")] == [{"price": 12.0}]
