"""The example shop's JavaScript page served by the real local HTTP server, and the system Chromium.

With ``CI=true`` a missing Chromium or Playwright fails the tests that need them instead of skipping them
(``.ci/run`` installs Debian's ``chromium``), as in test_ui.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from scrape_contracts_tests.fixture_site import FixtureSite

REPO = Path(__file__).resolve().parents[1]
SHOP = REPO / "examples" / "site" / "v1" / "shop.example.com"
EXAMPLE_CONTRACT = REPO / "examples" / "browser" / "deal.yaml"
DEAL = json.loads((SHOP / "deal.json").read_text())


def require_chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None
    if path is None:
        reason = "no system Chromium (apt-get install chromium; Playwright cannot download browsers here)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            reason = "Playwright is not installed (pip install -e .)"
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}: .ci/run installs it")
        pytest.skip(reason)
    assert path is not None
    return path


def serve_deal(site: FixtureSite, path: str = "/shop.example.com/deal", deal: dict | None = None) -> str:
    """The example deal page at ``<path>.html`` with its data at ``<path>.json``; the page's URL."""
    site.set_page(f"{path}.html", (SHOP / "deal.html").read_bytes())
    site.set_page(f"{path}.json", json.dumps(deal or DEAL), headers={"Content-Type": "application/json"})
    return site.url(f"{path}.html")
