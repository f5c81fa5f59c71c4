"""List contracts (records:) end to end: a real HTTP site, a real instance, both run paths."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pandas as pd
import pytest

from scrape_contracts.defs.history import read_trail
from scrape_contracts.service.accepted import read_accepted
from scrape_contracts.testing.reviews import Review, listing_pages, reviews
from scrape_contracts_tests.conftest import Harness, failed_checks, materialized_keys
from scrape_contracts_tests.defs.test_batch import run_batch
from scrape_contracts_tests.receiver import Receiver

REVIEWS_CONTRACT = """
name: reviews
targets:
  - url: {url}
    key: aurora
fetch:
  adapter: http
  timeout_s: 5
  retries: 0
  allow_private_addresses: true
records:
  item: article.review
  key: id
  pagination:
    next: "a[rel=next]::attr(href)"
    max_pages: 10
  coverage: {{rating: 95}}
  tolerance_pct: {tolerance}
fields:
  id:
    selector: "::attr(data-review-id)"
  author:
    selector: .author
  rating:
    selector: .rating
    type: integer
    pattern: '(\\d)\\s*/\\s*5'
    rules: {{min: 1, max: 5}}
  date:
    selector: "time::attr(datetime)"
    type: date
  text:
    selector: .text
"""

PATH = "/biz/aurora/reviews"


def serve(site: Any, items: list[Review], *, layout: str = "v1") -> None:
    pages = listing_pages(items, layout=layout, href=PATH + "?page={page}")
    for number, text in enumerate(pages, start=1):
        site.set_page(PATH if number == 1 else f"{PATH}?page={number}", text)
    for number in range(len(pages) + 1, 6):  # pages that no longer exist
        site.set_page(f"{PATH}?page={number}", "gone", status=404)


def write_contract(harness: Harness, site: Any, *, tolerance: float = 5) -> None:
    harness.write("reviews.yaml", REVIEWS_CONTRACT.format(url=site.url(PATH), tolerance=tolerance))


def accepted_records(harness: Harness) -> list[dict[str, Any]]:
    from scrape_contracts.engine.lists import set_records

    return set_records(harness.accepted("reviews", "aurora"))


def test_sixty_reviews_over_three_pages_are_extracted_and_read_one_row_each(sqlite_harness: Harness, site: Any
                                                                           ) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    result = harness.run("reviews", "aurora")
    assert result.success, failed_checks(result)
    assert materialized_keys(result) == {"scrape/reviews/candidate", "scrape/reviews"}
    records = accepted_records(harness)
    assert [r["record_key"] for r in records] == [f"r{i:03d}" for i in range(1, 61)]
    assert records[0] == {"record_key": "r001", "id": "r001", "author": "Ana", "rating": 1,
                          "date": "2026-12-28", "text": "Lovely coffee, visit 1."}
    # every page of the list, and robots.txt once (docs/politeness.md)
    assert {p.split("?")[0] for p in [r.path for r in site.requests]} == {PATH, "/robots.txt"}
    frame = read_accepted("reviews")
    assert len(frame) == 60
    assert list(frame.columns[:3]) == ["partition", "url", "record_key"]
    assert set(frame["partition"]) == {"aurora"}
    # the accepted asset says how many rows and which columns
    mat = harness.instance.fetch_materializations(dg.AssetKey(["scrape", "reviews"]), limit=1).records[0]
    assert mat.asset_materialization.metadata["dagster/row_count"].value == 60
    # stable keys: the same pages scraped again give the same rows
    serve(site, reviews(60))
    again = harness.run("reviews", "aurora", )
    assert again.success
    assert list(read_accepted("reviews")["record_key"]) == list(frame["record_key"])


def _check_metadata(result: dg.ExecuteInProcessResult, check: str) -> dict[str, Any]:
    for event in result.all_events:
        data = event.event_specific_data
        if event.event_type_value == "ASSET_CHECK_EVALUATION" and data.check_name == check:
            return {k: v.value for k, v in data.metadata.items()}
    raise AssertionError(f"no evaluation of {check}")


def test_half_the_reviews_gone_is_quarantined_by_the_set_change_limit(sqlite_harness: Harness, site: Any
                                                                       ) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert harness.run("reviews", "aurora").success
    # every page now lists only its first half: 30 of 60 records removed at once, one new review added
    half = [r for i, r in enumerate(reviews(60)) if i % 20 < 10]
    serve(site, [Review("r099", "Zed", 5, "2026-12-31", "Just opened again."), *half])
    result = harness.run("reviews", "aurora")
    assert not result.success
    failed = failed_checks(result)
    assert set(failed) == {"set_change_within_limit"}
    meta = failed["set_change_within_limit"]
    assert (meta["removed"], meta["added"], meta["changed"], meta["previous_records"]) == (30, 1, 0, 60)
    assert meta["added_keys"] == ["r099"] and len(meta["removed_keys"]) == 30
    assert "30 of 60 records removed at once" in meta["message"]
    candidate = harness.store.latest_candidate("reviews", "aurora")
    assert candidate.status == "quarantined"
    assert len(accepted_records(harness)) == 60  # the last accepted set survives
    # the per-record diff is in the event trail
    trail = read_trail(harness.instance, "reviews", partition="aurora", limit=1000)[0]
    change = [e for e in trail if e.stage == "change_detected" and e.run_id == result.run_id]
    assert change and change[0].metadata["removed"] == 30 and change[0].metadata["added_keys"] == ["r099"]
    # a reviewer who knows the business closed half its listing accepts it
    assert harness.review("reviews", "aurora", "accept").success
    assert len(accepted_records(harness)) == 31
    mat = harness.instance.fetch_materializations(dg.AssetKey(["scrape", "reviews"]), limit=1).records[0]
    assert mat.asset_materialization.metadata["dagster/row_count"].value == 31
    assert len(read_accepted("reviews")) == 31


def test_duplicate_keys_fail_uniqueness(sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    items = reviews(60)
    items[30] = items[3]  # the site lists one review twice
    serve(site, items)
    write_contract(harness, site)
    result = harness.run("reviews", "aurora")
    # rejected: never materialised, the failed check says why (a rejected candidate ends the run quietly)
    assert "scrape/reviews" not in materialized_keys(result)
    assert set(failed_checks(result)) == {"record_keys_unique"}
    assert "'r004' ×2" in failed_checks(result)["record_keys_unique"]["message"]
    assert harness.store.latest_candidate("reviews", "aurora").status == "rejected"
    assert harness.accepted("reviews", "aurora") is None


def _without_rating(site: Any, review_ids: list[str]) -> None:
    for number, text in enumerate(listing_pages(reviews(60), href=PATH + "?page={page}"), start=1):
        for review in reviews(60):
            if review.id in review_ids:
                item = f'data-review-id="{review.id}"><span class="author">{review.author}</span>'
                text = text.replace(item + f'<span class="rating">{review.rating}/5</span>', item)
        site.set_page(PATH if number == 1 else f"{PATH}?page={number}", text)


@pytest.mark.parametrize("tolerance", [5, 0])
def test_a_record_missing_a_required_field_is_dropped_within_the_tolerance(sqlite_harness: Harness, site: Any,
                                                                           tolerance: float) -> None:
    harness = sqlite_harness
    _without_rating(site, ["r010"])
    write_contract(harness, site, tolerance=tolerance)
    result = harness.run("reviews", "aurora")
    if tolerance:
        assert result.success, failed_checks(result)
        meta = _check_metadata(result, "records_within_tolerance")
        assert (meta["records"], meta["dropped"]) == (59, 1)
        keys = [r["record_key"] for r in accepted_records(harness)]
        assert len(keys) == 59 and "r010" not in keys
        dropped = harness.store.latest_accepted("reviews", "aurora").record["@dropped"]
        assert [d["record_key"] for d in dropped] == ["r010"]
        assert "rating is required but was not found on the page" in dropped[0]["reasons"]
    else:
        assert "scrape/reviews" not in materialized_keys(result)
        failed = failed_checks(result)
        assert set(failed) == {"records_within_tolerance"}
        assert "1 of 60 records (1.7%) break the contract, more than the tolerated 0%" in failed[
            "records_within_tolerance"]["message"]
        assert "record r010: rating is required" in failed["records_within_tolerance"]["message"]
        assert harness.accepted("reviews", "aurora") is None


def test_batched_run_gives_the_same_set_and_diff(sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    first = run_batch(harness, "reviews")
    assert first.success
    assert len(accepted_records(harness)) == 60
    mat = harness.instance.fetch_materializations(dg.AssetKey(["scrape", "reviews"]), limit=1).records[0]
    assert mat.asset_materialization.metadata["dagster/row_count"].value == 60
    # an unchanged listing is unchanged; half of it gone is quarantined with the counts on the check
    assert run_batch(harness, "reviews").success
    assert harness.store.latest_candidate("reviews", "aurora").outcome == "unchanged"
    serve(site, [r for i, r in enumerate(reviews(60)) if i % 20 < 10])
    third = run_batch(harness, "reviews")
    failed = failed_checks(third)
    assert set(failed) == {"set_change_within_limit"}
    meta = failed["set_change_within_limit"]
    assert (meta["removed"], meta["added"]) == (30, 0)
    assert harness.store.latest_candidate("reviews", "aurora").status == "quarantined"
    assert len(read_accepted("reviews")) == 60


def test_downstream_assets_get_one_row_per_record(sqlite_harness: Harness, site: Any) -> None:
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.defs.assets import build_contract_assets
    from scrape_contracts.defs.names import accepted_key
    from scrape_contracts.defs.io_managers import default_resources

    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert harness.run("reviews", "aurora").success
    accepted = build_contract_assets(load_contracts(harness.contracts_dir).by_name()["reviews"]).accepted

    @dg.asset(ins={"reviews": dg.AssetIn(key=accepted_key("reviews"))})
    def mean_rating(reviews: pd.DataFrame) -> float:
        assert len(reviews) == 60 and set(reviews["partition"]) == {"aurora"}
        return float(reviews["rating"].mean())

    @dg.asset(ins={"reviews": dg.AssetIn(key=accepted_key("reviews"))},
              partitions_def=accepted.partitions_def)
    def authors(reviews: pd.DataFrame) -> int:
        return reviews["author"].nunique()

    result = dg.materialize([mean_rating, accepted.to_source_asset()], instance=harness.instance,
                            resources=default_resources())
    assert result.output_for_node("mean_rating") == sum(r.rating for r in reviews(60)) / 60
    result = dg.materialize([authors, accepted.to_source_asset()], instance=harness.instance,
                            resources=default_resources(), partition_key="aurora")
    assert result.output_for_node("authors") == 12


def test_a_markup_change_of_the_list_heals_and_yields_the_same_records(sqlite_harness: Harness, site: Any
                                                                       ) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert harness.run("reviews", "aurora").success
    before = read_accepted("reviews")
    # a redesign: no article.review any more, hashed classes; microdata on the items and their fields
    serve(site, reviews(60), layout="redesign")
    result = harness.run("reviews", "aurora")
    assert result.success, failed_checks(result)
    candidate = harness.store.latest_candidate("reviews", "aurora")
    assert candidate.outcome == "healed"
    heal = candidate.details["heal"]
    assert heal["results"]["@item"]["old_selector"] == "article.review"
    assert heal["results"]["@item"]["selector"] == 'div[itemprop="review"]'
    assert heal["results"]["@item"]["evidence"]["items"] == 20  # several similar siblings on page 1
    assert {"author", "rating", "text"} <= set(heal["results"])
    after = read_accepted("reviews")
    columns = ["record_key", "id", "author", "rating", "date", "text"]
    assert after[columns].to_dict("records") == before[columns].to_dict("records")
    # the same records, accepted with the new page (as a healed single record is)
    assert len(after) == 60 and set(after["_version"]) == {2}
    history = harness.store.selector_history("reviews")
    assert [v.source for v in history] == ["contract", "heal"]
    assert history[-1].selectors["@item"] == 'div[itemprop="review"]'
    # the next run reads the new layout with the healed selectors, no heal needed
    again = harness.run("reviews", "aurora")
    assert again.success and harness.store.latest_candidate("reviews", "aurora").outcome == "unchanged"


def test_a_list_whose_records_are_gone_is_not_healed_into_something_else(sqlite_harness: Harness, site: Any
                                                                         ) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert harness.run("reviews", "aurora").success
    # the page now lists other reviews in other markup: nothing known to relocate the items from
    others = [Review(f"x{i:03d}", "Someone", 3, "2025-01-01", f"Another place entirely, note {i}.")
              for i in range(60)]
    serve(site, others, layout="redesign")
    result = harness.run("reviews", "aurora")
    candidate = harness.store.latest_candidate("reviews", "aurora")
    assert candidate.outcome == "rejected"
    assert "@item" in candidate.details["heal"]["reason"]
    assert "record_count_within_bounds" in failed_checks(result)
    assert len(read_accepted("reviews")) == 60


def test_a_batched_run_heals_the_list_too(sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert run_batch(harness, "reviews").success
    serve(site, reviews(60), layout="redesign")
    assert run_batch(harness, "reviews").success
    candidate = harness.store.latest_candidate("reviews", "aurora")
    assert candidate.outcome == "healed"
    assert candidate.details["heal"]["results"]["@item"]["selector"] == 'div[itemprop="review"]'
    assert [r["record_key"] for r in accepted_records(harness)] == [f"r{i:03d}" for i in range(1, 61)]


def test_record_added_and_changed_activations_fire_once_per_new_set(sqlite_harness: Harness, site: Any,
                                                                     receiver: Receiver) -> None:
    from scrape_contracts_tests.defs.test_activations import _deliver, _tick

    harness = sqlite_harness
    serve(site, reviews(60))
    rules = """
activations:
  - name: new_review
    when: {record: added}
    notify: [hook]
    payload: [author, rating]
  - name: downgraded
    when: {all: [{record: changed}, {field: rating, decreased_by_more_than: 1}]}
    notify: [hook]
"""
    harness.write("reviews.yaml", REVIEWS_CONTRACT.format(url=site.url(PATH), tolerance=5) + rules)
    harness.write_hook_destination(receiver)
    defs = harness.definitions()
    assert harness.run("reviews", "aurora", defs).success  # the first set: nothing to compare with
    cursor = _tick(harness, defs, None).cursor
    items = reviews(60)
    items[7] = Review(items[7].id, items[7].author, 1, items[7].date, items[7].text)  # was 5 stars
    serve(site, [Review("r100", "Nadia", 5, "2026-12-31", "Opened a second room."), *items])
    assert harness.run("reviews", "aurora", defs).success
    for request in _tick(harness, defs, cursor).run_requests or []:
        assert _deliver(harness, defs, request).success
    bodies = {got.json()["rule"]: got.json() for got in receiver.received}
    assert set(bodies) == {"new_review", "downgraded"}
    assert bodies["new_review"]["record"] == {"count": 1, "records": [{"author": "Nadia", "rating": 5}]}
    assert bodies["new_review"]["changes"] == [{"set": {"added": 1, "removed": 0, "changed": 1,
                                                        "previous_records": 60}}]
    assert bodies["downgraded"]["record"]["records"][0]["record_key"] == "r008"
    assert "record r008: changed" in bodies["downgraded"]["reasons"]


def test_a_list_over_the_item_limit_is_refused_naming_the_limit_without_a_heal(
        sqlite_harness: Harness, site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    serve(site, reviews(60))
    write_contract(harness, site)
    assert harness.run("reviews", "aurora").success
    monkeypatch.setenv("SCRAPE_CONTRACTS_LIST_MAX_ITEMS", "50")
    serve(site, reviews(61))  # a new page (the same one would reuse the accepted set unread)
    result = harness.run("reviews", "aurora")
    assert "record_count_within_bounds" in failed_checks(result)
    assert harness.store.latest_candidate("reviews", "aurora").status == "rejected"
    trail = [e for e in read_trail(harness.instance, "reviews", partition="aurora", limit=1000)[0]
             if e.run_id == result.run_id]
    # a bound that was hit is not a broken selector: no heal attempt spends the budget on it
    assert "healing" not in {e.stage for e in trail}
    [extracted] = [e for e in trail if e.stage == "extracted"]
    [problem] = extracted.metadata["problems"]
    assert problem["kind"] == "limit_exceeded" and "SCRAPE_CONTRACTS_LIST_MAX_ITEMS" in problem["message"]
    assert len(read_accepted("reviews")) == 60
