"""Record sets: items, keys, pages, the set's checks and its diff by key."""

from __future__ import annotations

import re
from typing import Any

from scrape_contracts.adapters.fetch.http import HttpFetcher
from scrape_contracts.adapters.fetch.paging import PagingFetcher
from scrape_contracts.contract.records import Pagination
from scrape_contracts.engine.lists import extract_records, join_pages, record_key, split_pages
from scrape_contracts.engine.set_checks import diff_sets, judge_set
from scrape_contracts.testing.reviews import Review, listing_pages, reviews


def _fields() -> dict[str, Any]:
    from scrape_contracts.contract.fields import FieldSpec

    return {"id": FieldSpec(selector="::attr(data-review-id)"), "author": FieldSpec(selector=".author"),
            "rating": FieldSpec(selector=".rating", type="integer", pattern=r"(\d)/5")}


def test_items_of_every_page_with_keys_and_a_value_hash_when_there_is_no_key() -> None:
    pages = listing_pages(reviews(7), per_page=3)
    document = join_pages([(f"https://x.example/r?page={i}", p) for i, p in enumerate(pages, start=1)])
    assert [u for u, _ in split_pages(document, None)] == [f"https://x.example/r?page={i}" for i in (1, 2, 3)]
    by_id = extract_records(document, _fields(), {}, "article.review", ["id"])
    assert (by_id.pages, by_id.items, by_id.problems) == (3, 7, ())
    assert [r["record_key"] for r in by_id.records] == [f"r{i:03d}" for i in range(1, 8)]
    hashed = extract_records(document, _fields(), {}, "article.review", [])
    # the hash is of the values: the same record in other markup keeps its key
    assert hashed.records[0]["record_key"] == record_key({"id": "r001", "author": "Ana", "rating": 1}, [])
    redesigned = join_pages([(f"https://x.example/r?page={i}", p) for i, p in
                             enumerate(listing_pages(reviews(7), per_page=3, layout="redesign"), start=1)])
    gone = extract_records(redesigned, _fields(), {}, "article.review", ["id"])
    assert gone.records == () and gone.problems[0].field == "@item"


class _Limits:
    min_records, max_records, coverage, tolerance_pct = 1, None, {}, 0.0
    max_removed_pct, max_added_pct, max_changed_pct = 30.0, None, 10.0


def test_diff_by_key_and_set_change_limits() -> None:
    old = [{"record_key": k, "v": i} for i, k in enumerate("abcdefghij")]
    new = [{"record_key": "a", "v": 0}, {"record_key": "b", "v": 99}, *old[2:6], {"record_key": "z", "v": 1}]
    diff = diff_sets(old, new)
    assert (diff.added, diff.removed, diff.changed) == (("z",), ("g", "h", "i", "j"), ("b",))
    judged = judge_set(new, {}, {"type": "object"}, _Limits(), old)
    messages = [v.message for v in judged.violations]
    assert messages == ["4 of 10 records removed at once (40.0%), more than the allowed 30%: "
                        "a person must review it"]
    assert judged.summary["removed"] == 4 and judged.summary["added"] == 1


def test_pagination_follows_next_links_and_a_url_template_until_the_list_ends(site: Any) -> None:
    for i, page in enumerate(listing_pages(reviews(50), per_page=20, href="/r?page={page}"), start=1):
        site.set_page(f"/r?page={i}" if i > 1 else "/r", page)
    site.set_page("/r?page=4", "gone", status=404)
    http = HttpFetcher(timeout_s=5, allow_private_addresses=True, retries=0)
    following = PagingFetcher(http, Pagination(next="a[rel=next]::attr(href)"), "article.review")
    page = following.fetch(site.url("/r"))
    assert len(split_pages(page.html, page.url)) == 3
    assert page.attempts[-1]["stopped"] == "no next link on page 3"
    template = PagingFetcher(http, Pagination(url_template="{url}?page={page}"), "article.review")
    page = template.fetch(site.url("/r"))
    assert len(split_pages(page.html, page.url)) == 3
    assert page.attempts[-1]["stopped"].endswith("answered 404")
    bounded = PagingFetcher(http, Pagination(url_template="{url}?page={page}", max_pages=2), "article.review")
    assert bounded.fetch(site.url("/r")).attempts[-1]["stopped"] == "max_pages 2 reached"
    # a site that answers every page number with its last page: the repeat ends the list
    site.set_page("/r?page=4", listing_pages(reviews(50), per_page=20, href="/r?page={page}")[2])
    page = template.fetch(site.url("/r"))
    assert len(split_pages(page.html, page.url)) == 3
    assert "repeats an earlier page" in page.attempts[-1]["stopped"]
    http.close()


def _known(items: list[Any]) -> list[dict[str, Any]]:
    return [{"record_key": r.id, "id": r.id, "author": r.author, "rating": r.rating, "date": r.date,
             "text": r.text} for r in items]


def test_items_are_relocated_from_the_last_accepted_records_or_refused() -> None:
    from scrape_contracts.engine.heal.items import relocate_items

    page = listing_pages(reviews(60), layout="redesign")[0]
    found = relocate_items(page, _known(reviews(60)), "record_key")
    assert found.selector == 'div[itemprop="review"]' and found.evidence["items"] == 20
    assert len(found.items) == 20 and found.confidence == 1.0
    # one record is not a list: never relocate the items on a single element
    one = listing_pages(reviews(1), layout="redesign")[0]
    lonely = relocate_items(one, _known(reviews(60)), "record_key")
    assert lonely.selector is None and "at least 2 needed" in lonely.refusal
    # the records are not on the page any more: nothing to relocate from
    strangers = [Review(f"x{i}", "Zed", 1, "2020-01-01", f"Elsewhere, note {i}") for i in range(20)]
    others = relocate_items(page, _known(strangers), "record_key")
    assert others.selector is None
    # items with only generated class names and an unnamed parent: refused rather than positional
    bare = re.sub(r' data-review-id="[^"]*"', "", page.replace(' itemprop="review" itemscope', "")
                  .replace(' class="css-l1st"', ""))
    known = [{k: v for k, v in r.items() if k != "id"} for r in _known(reviews(60))]  # the ids went too
    assert relocate_items(bare, known, "record_key").refusal.startswith("the items have nothing")


def test_an_item_selector_that_misses_items_is_refused_with_the_counts(monkeypatch) -> None:
    from scrape_contracts.engine.heal import items as items_module

    page = listing_pages(reviews(60), layout="redesign")[0]
    # a selector that keeps only the first of the list's items: the check after it must refuse, not crash
    monkeypatch.setattr(items_module, "_item_selector",
                        lambda parent, found, tag: (f"{tag}[itemprop='review']:first-child", "class"))
    refused = items_module.relocate_items(page, _known(reviews(60)), "record_key")
    assert refused.selector is None and "does not select exactly the list's items" in refused.refusal
    assert refused.evidence["items"] == 20 and refused.evidence["matched"] <= 1
