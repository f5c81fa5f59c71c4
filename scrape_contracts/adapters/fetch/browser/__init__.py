"""The browser adapter: pages rendered by the system's headless Chromium, driven by Playwright.

``AsyncBrowserFetcher`` (``render``; a batch worker's fetcher, one browser per process) and its blocking
face ``BrowserFetcher`` (``sync``; the one-target ops) return the same ``Page`` as the http adapter.
``proxy`` puts the address guard in front of every request the page makes; ``settle`` waits for a loaded
page's network to go quiet, its click steps and ``wait_for``; ``chromium`` finds the browser and says how to
install it when it is missing.
"""

from scrape_contracts.adapters.fetch.browser.chromium import BrowserUnavailable, find_chromium
from scrape_contracts.adapters.fetch.browser.proxy import GuardProxy, Refusal
from scrape_contracts.adapters.fetch.browser.render import AsyncBrowserFetcher
from scrape_contracts.adapters.fetch.browser.sync import BrowserFetcher

__all__ = [
    "AsyncBrowserFetcher", "BrowserFetcher", "BrowserUnavailable", "GuardProxy", "Refusal", "find_chromium",
]
