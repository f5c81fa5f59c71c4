"""``fetch.browser`` in a contract: every mistake reported with its place, in one pass."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scrape_contracts.cli import main

MISTAKES = """
name: shop
targets: [https://shop.example.com/p/1]
fetch:
  adapter: browser
  headers: {Authorization: "Bearer ${TOKEN}"}
  browser:
    wait_for: ".price::text"
    timeout_s: 0
    clicks:
      - {selector: "button[", times: 0}
      - {selectr: "#more"}
fields:
  title: {selector: h1}
"""

BROWSER_ON_HTTP = """
name: shop
targets: [https://shop.example.com/p/1]
fetch:
  browser: {wait_for: ".price"}
fields:
  title: {selector: h1}
"""


def test_browser_settings_mistakes_are_reported_with_their_place(tmp_path: Path, capsys) -> None:
    (tmp_path / "shop.yaml").write_text(textwrap.dedent(MISTAKES))
    assert main(["--contracts-dir", str(tmp_path), "validate"]) == 1
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if line.startswith("error")]
    places = sorted(line.split(": ")[1] for line in errors)
    assert places == sorted(["fetch.browser.wait_for", "fetch.browser.timeout_s",
                             "fetch.browser.clicks[0].selector", "fetch.browser.clicks[0].times",
                             "fetch.browser.clicks[1].selector", "fetch.browser.clicks[1].selectr"]), out
    assert "must be a plain CSS selector" in out and "is not valid CSS" in out
    assert all("shop.yaml:" in line for line in errors)


def test_headers_and_browser_settings_need_the_browser_adapter_right(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "headers"
    folder.mkdir()
    fixed = MISTAKES.replace('".price::text"', '".price"').replace("timeout_s: 0", "timeout_s: 5")
    fixed = fixed.replace('{selector: "button[", times: 0}', '{selector: "button"}')
    fixed = fixed.replace("selectr", "selector")
    (folder / "shop.yaml").write_text(textwrap.dedent(fixed))
    assert main(["--contracts-dir", str(folder), "validate"]) == 1
    assert "fetch.headers are not sent by the browser adapter" in capsys.readouterr().out

    (tmp_path / "shop.yaml").write_text(textwrap.dedent(BROWSER_ON_HTTP))
    assert main(["--contracts-dir", str(tmp_path), "validate"]) == 1
    out = capsys.readouterr().out
    assert "fetch.browser is only read by the browser adapter; set `adapter: browser`" in out
