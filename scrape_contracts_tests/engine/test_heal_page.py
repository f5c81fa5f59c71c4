"""A heal's page machinery gives the answers of the slower ways it replaced: its CSS matcher selects what
XPath (cssselect's translation) selects, its texts are the extractor's, bare digits read as price-parser
reads them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from price_parser import Price

from scrape_contracts.engine.extract import parse_value
from scrape_contracts.engine.heal import matcher
from scrape_contracts.engine.heal.page import LONG_TEXT, Page
from scrape_contracts.engine.heal.query import select_elements
from scrape_contracts.engine.select import element_text, normalise_space, parse_html, select

PAGE = """<html><body>
<main id="main" class="page  wide">
  <div class="card product" data-testid="card"><h2>One</h2><span class="price now">$1</span>
    <!-- a comment between siblings --><span class="price was">$2</span><span>x</span></div>
  <div class="card"><h2 class="title">Two</h2>
    <p><span class="price">$3</span></p><span class="price\tnow">$4</span></div>
  <div class="card product"><span data-x='say "hi"'>q</span><span data-x="a\\b">r</span>
    <span class="PRICE">$5</span><span class="pricey">$6</span><span class="pr&#160;ice">$7</span></div>
  <section aria-label="More"><div class="card"><span class="price">$8</span></div></section>
</main>
<footer><span class="price">$9</span></footer>
</body></html>"""

SELECTORS = [
    "span", ".price", "span.price", ".price.now", "span.price.now", ".product .price", ".card > .price",
    "div.card > span.price", "h2 + span", "h2 + span.price", "span.now + span", ".now + .was", "h2 + .was",
    "span:nth-of-type(2)", "div > span:nth-of-type(3)", ".card span:nth-of-type(1)", "#main .price",
    "#main > div.card > span", "main div span", "main section div span", "section .price", "footer .price",
    '[data-testid="card"] span', '[data-x="say \\"hi\\""]', "div.product > span + span",
    ".PRICE", ".pricey", "main .missing", "#nope span", "html", "body > main", "html > body", ".page.wide",
    '[aria-label="More"] .price', "div div span", "main div > h2 + span", "span span",
    "main > div > p > span",
]


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("few", [10**6, 1], ids=["bottom-up", "top-down"])
def test_matcher_selects_what_xpath_selects(selector: str, few: int) -> None:
    """Bottom-up (every compound's own matches related to the left ones) and top-down (down from a few
    anchors, where a compound matches more than ``few`` elements) must both give XPath's answer."""
    page = Page(PAGE)
    parsed = matcher.parse(selector)
    assert parsed is not None, f"{selector!r} should be in the matcher's grammar"
    limits = matcher.FAST_POOL, matcher.SCANNED
    matcher.FAST_POOL, matcher.SCANNED = few, 10**6
    try:
        found = matcher.match(page, parsed)
    finally:
        matcher.FAST_POOL, matcher.SCANNED = limits
    expected = [n.root for n in select(parse_html(PAGE), selector)]
    if found is not None or few > 1:  # top-down declines some shapes (adjacency, no tag): XPath answers
        assert found is not None
        assert [_path(el) for el in found] == [_path(el) for el in expected]


def _path(el) -> str:
    return el.getroottree().getpath(el)


@pytest.mark.parametrize("selector", [
    "a:hover", "span:nth-of-type(2n+1)", "*", "a ~ b", "a, b", " span", "span ", "//span", "SPAN", "[data-x]",
    '[data-x="\\31 "]', '[data-x="a\\\\b"]', ".1a", "span::text", "*:nth-of-type(2)", ".x:nth-of-type(1)",
])
def test_matcher_leaves_other_selectors_to_xpath(selector: str) -> None:
    assert matcher.parse(selector) is None


def test_select_elements_agrees_with_xpath_and_matches_once_per_page() -> None:
    page = Page(PAGE)
    for selector in SELECTORS:
        expected = [n.root for n in select(parse_html(PAGE), selector)]
        got = [_path(el) for el in select_elements(page, selector)]
        assert got == [_path(el) for el in expected], selector
    assert set(SELECTORS) <= set(page.selected)


def test_plain_digits_read_as_price_parser_reads_them() -> None:
    for text in ["0", "7", "007", "316", "1234567", "123456789012345"]:
        assert Price.fromstring(text).amount == Decimal(text)
        assert parse_value(text, "integer") == int(text)
        assert parse_value(text, "price") == float(text)


def test_page_texts_are_the_extractors_texts() -> None:
    """Each element's text, built bottom-up once per page, is what the extractor reads from it."""
    html = ("<html><body><p>a\u00a0 b<span>\u2003c </span>\x1cd<!-- x -->e\n</p><style>x</style>tail"
            "<div>\n  <i>" + "long " * 900 + "</i> and <b> more\t</b></div>"
            "<ul><li> one </li><li>two</li></ul>"
            "</body></html>")
    page = Page(html)
    for el in page.elements:
        expected = element_text(el)
        got = page.text[el]
        assert (got if len(got) <= LONG_TEXT else normalise_space(got)) == expected


def test_a_numbers_digits_are_in_every_text_that_reads_as_it() -> None:
    """The scan for the last accepted number skips texts without its significant digits: every text that
    parses to the number must hold them, whatever its separators, currency or trailing zeros."""
    from scrape_contracts.engine.heal.candidates import _digits_of

    for text in ["$1,299.00", "1.299,00 €", "1 299", "1,8", "1.80", "Rating 1.8 / 5", "EUR 107,60", "0.50",
                 "18", "-3.25", "25'000", "1\u00a0234,5"]:
        for field_type in ("price", "number"):
            value = parse_value(text, field_type)
            digits = _digits_of(value)
            assert digits is None or digits in "".join(c for c in text if c.isdigit()), (text, value)
