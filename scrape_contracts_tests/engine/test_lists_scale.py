"""List extraction at scale: an item's selectors cost the item, not the page again; limits name themselves."""

from __future__ import annotations

from typing import Any

import pytest

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.lists import extract_records, join_pages
from scrape_contracts.engine.limits import Limits
from scrape_contracts.engine.select import compile_selector
from scrape_contracts.engine.xpath_cost import stays_inside
from scrape_contracts.testing.reviews import listing_pages, reviews, reviews_page


def _fields(**extra: FieldSpec) -> dict[str, Any]:
    return {"id": FieldSpec(selector="::attr(data-review-id)"), "author": FieldSpec(selector=".author"),
            "rating": FieldSpec(selector=".rating", type="integer", pattern=r"(\d)/5"), **extra}


def _padded(count: int, padding: int) -> str:
    """A page of ``count`` review items and ``padding`` other elements around them."""
    return reviews_page(reviews(count)).replace(
        "<footer>(c) 2026</footer>", "<footer>" + "<p>x</p>" * padding + "</footer>")


def test_item_selectors_are_estimated_on_the_item_not_on_the_whole_page_again() -> None:
    # every item's ".author" estimated on the page's 41,000 nodes is over this budget (what made a list
    # quadratic: each item counted the page again); on the item's own dozen nodes, 200 items fit in it
    limits = Limits(selector_max_cost=200_000)
    extraction = extract_records(_padded(200, 20_000), _fields(), {}, "article", ["id"], limits=limits)
    assert extraction.problems == () and extraction.items == 200
    assert extraction.field_failures == {"id": 0, "author": 0, "rating": 0}
    assert extraction.records[199] == {"record_key": "r200", "id": "r200", "author": "Hana", "rating": 4}


def test_a_whole_page_selector_in_every_item_ends_in_the_selector_limit_for_the_list() -> None:
    # "//h1" in an item reads the whole page each time: fine once, a page-sized walk per item for a list
    limits = Limits(selector_max_cost=1_000_000)
    fields = _fields(business=FieldSpec(selector="//h1"))
    extraction = extract_records(_padded(200, 20_000), fields, {}, "article", ["id"], limits=limits)
    assert extraction.records == () and extraction.items == 0
    [problem] = extraction.problems
    assert (problem.field, problem.kind) == ("@item", "limit_exceeded")
    assert "inside the items" in problem.message and "selector '//h1' was next" in problem.message
    assert "SCRAPE_CONTRACTS_SELECTOR_MAX_COST" in problem.message
    # one item's worth is not refused
    assert extract_records(_padded(3, 20_000), fields, {}, "article", ["id"], limits=limits).problems == ()


def test_a_target_with_more_items_than_the_limit_is_refused_naming_the_limit() -> None:
    pages = listing_pages(reviews(7), per_page=3)
    document = join_pages([(f"https://x.example/r?page={i}", p) for i, p in enumerate(pages, start=1)])
    refused = extract_records(document, _fields(), {}, "article.review", ["id"], limits=Limits(list_max_items=5))
    assert refused.records == () and refused.pages == 3
    [problem] = refused.problems
    assert (problem.field, problem.kind) == ("@item", "limit_exceeded")
    assert problem.message == ("the target has more than 5 items (6 on its first 2 page(s)): limit "
                               "list_max_items=5 (setting SCRAPE_CONTRACTS_LIST_MAX_ITEMS)")
    assert extract_records(document, _fields(), {}, "article.review", ["id"],
                           limits=Limits(list_max_items=7)).items == 7


def test_list_item_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrape_contracts import settings

    assert settings.engine_limits().list_max_items == 100_000
    monkeypatch.setenv("SCRAPE_CONTRACTS_LIST_MAX_ITEMS", "250")
    assert settings.engine_limits().list_max_items == 250


@pytest.mark.parametrize(("selector", "inside"), [
    (".author", True), ("::attr(data-review-id)", True), (".rating::text", True), ("a::attr(href)", True),
    ("./span[count(b) > 1]/text()", True), ("./descendant::*[@itemprop='name']", True), ("(./p)[1]", True),
    ("//h1", False), ("/html/body", False), ("./..", False), ("./span[//h1]", False), ("a ~ b", False),
    ("./ancestor::section/h2", False), ("./following::p", False), ("(./p | id('x'))", False),
    ("(//p)[1]", False),
])
def test_which_selectors_stay_inside_the_node_they_start_from(selector: str, inside: bool) -> None:
    # CSS and XPath alike, as the contract gives them (compile_selector turns CSS into XPath)
    assert stays_inside(compile_selector(selector)) is inside
