"""When the http adapter's page says "the page may need the browser adapter", and when it does not."""

from __future__ import annotations

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.extract import extract_record
from scrape_contracts.engine.rendering import BROWSER_HINT, browser_hint, has_scripts
from scrape_contracts_tests.browser_site import EXAMPLE_CONTRACT, SHOP

FIELDS = {"title": ".deal-title", "price": ".deal-price"}


def _hint(html: str) -> str | None:
    specs = {name: FieldSpec(selector=selector) for name, selector in FIELDS.items()}
    extraction = extract_record(html, specs, FIELDS)
    return browser_hint(html, extraction.problems, list(FIELDS))


def test_a_script_filled_shell_gets_the_hint() -> None:
    assert EXAMPLE_CONTRACT.exists()
    assert _hint((SHOP / "deal.html").read_text()) == BROWSER_HINT
    shell = '<html><body><div id="root"></div><script src="/app.js"></script></body></html>'
    assert _hint(shell) == BROWSER_HINT


def test_no_hint_without_scripts_or_when_a_field_matched() -> None:
    # a page without code: the selectors are wrong, not the adapter
    assert _hint("<html><body><h2>gone</h2></body></html>") is None
    # JSON-LD and JSON data blocks are not code a browser runs, nor is an empty script
    assert not has_scripts('<script type="application/ld+json">{"@type": "Book"}</script><script></script>')
    assert _hint('<html><body><script type="application/ld+json">{}</script></body></html>') is None
    # one field found: the page is rendered enough, the others are a selector (or healing) problem
    assert _hint('<html><body><h1 class="deal-title">t</h1><script>x()</script></body></html>') is None
