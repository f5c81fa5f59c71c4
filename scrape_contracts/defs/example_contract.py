"""The example contract ``dg scaffold defs scrape_contracts.ScrapeContracts`` writes: one saved page, two
fields, runs offline. It shows the shape of a contract; the format is in docs/contracts.md."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_CONTRACT = """\
# An example: one product page, two fields. It reads a saved copy of the page (fetch.adapter: fixture), so it
# runs offline; for a real site write `adapter: http` and the page's own URL. Format: docs/contracts.md.
name: example
description: Name and price of one product page (a saved copy in ../example_site).
targets:
  - url: https://shop.example.com/product/1.html
    key: product-1
fetch:
  adapter: fixture
  fixture_dir: ../example_site
fields:
  name:
    selector: "h1[itemprop=name]"
  price:
    selector: "[itemprop=price]"
    type: price
    rules: {min: 0, max_change_pct: 50}
"""

EXAMPLE_PAGE = """\
<!doctype html>
<html><head><meta charset="utf-8"><title>Desk lamp</title></head>
<body><main itemscope>
  <h1 itemprop="name">Desk lamp</h1>
  <p>Price: <span itemprop="price">$24.50</span></p>
</main></body></html>
"""


def write_example(contracts_dir: Path) -> None:
    """``contracts_dir/example.yaml`` and the page it reads, ``../example_site/shop.example.com/product/1.html``."""
    page = contracts_dir.parent / "example_site" / "shop.example.com" / "product" / "1.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(EXAMPLE_PAGE, encoding="utf-8")
    contracts_dir.mkdir(parents=True, exist_ok=True)
    (contracts_dir / "example.yaml").write_text(EXAMPLE_CONTRACT, encoding="utf-8")
