"""``discover:`` in a contract: every mistake reported with its file, field and line, and no password in a
source URL echoed back."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scrape_contracts.contract.loader import load_contracts

FIELDS = "fields: {title: {selector: h1}}\n"


def _errors(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "shop.yaml").write_text(textwrap.dedent(text))
    result = load_contracts(tmp_path)
    return [str(error) for error in result.errors]


def test_a_discovering_contract_is_dynamic_without_saying_so(tmp_path: Path) -> None:
    sitemaps = "discover:\n  sitemaps: [https://s.example/sitemap.xml]\n"
    (tmp_path / "shop.yaml").write_text("name: shop\n" + FIELDS + sitemaps)
    (loaded,) = load_contracts(tmp_path).contracts
    contract = loaded.contract
    assert contract.is_dynamic and contract.discover.sources() == ["https://s.example/sitemap.xml"]
    assert contract.discover.schedule.cron == "0 0 * * *" and not contract.skips_unchanged


def test_every_mistake_in_discover_is_named_with_its_line(tmp_path: Path) -> None:
    errors = _errors(tmp_path, """\
        name: shop
        targets: [https://s.example/p/1]
        fields: {title: {selector: h1}}
        discover:
          sitemaps:
            - url: https://bot:hunter2@s.example/sitemap.xml
              keep: "(unclosed"
          listings:
            - url: https://s.example/c
              follow: "a["
              depth: 9
          hosts: ["https://s.example/"]
          schedule: "every day"
        """)
    text = "\n".join(errors)
    assert "hunter2" not in text
    assert ("shop.yaml:6: discover.sitemaps[0].url: source URL 'https://s.example/sitemap.xml' carries a "
            "user name") in text
    assert "shop.yaml:7: discover.sitemaps[0].keep: keep '(unclosed' is not a valid regular" in text
    assert "shop.yaml:10: discover.listings[0].follow: invalid CSS selector 'a['" in text
    assert "shop.yaml:11: discover.listings[0].depth" in text
    assert "discover.hosts: hosts are names such as shop.example" in text
    assert "discover.schedule.cron: invalid cron expression 'every day'" in text
    assert "discover: adds targets at runtime, so the contract's targets must be dynamic" in text


def test_discover_needs_a_source(tmp_path: Path) -> None:
    (error,) = _errors(tmp_path, "name: shop\n" + FIELDS + "discover: {skip_unchanged: true}\n")
    assert "discover: needs at least one source" in error
