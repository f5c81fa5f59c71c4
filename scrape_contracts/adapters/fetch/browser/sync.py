"""``BrowserFetcher``: the blocking face of ``AsyncBrowserFetcher``, for the one-target ops.

The async fetcher runs on an event loop of its own, in a thread, so a blocking caller (a Dagster op, a
thread of a test) never needs a loop and never finds one already running in its way.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from scrape_contracts.adapters.fetch.browser.render import AsyncBrowserFetcher
from scrape_contracts.adapters.fetch.page import ClosesOnExit, Page


class BrowserFetcher(ClosesOnExit):
    """Takes the arguments of ``AsyncBrowserFetcher``; ``fetch`` blocks, ``close`` stops the browser."""

    def __init__(self, **options: Any) -> None:
        self.fetcher = AsyncBrowserFetcher(**options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="browser-fetcher", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"BrowserFetcher({self.fetcher!r})"

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        call = self.fetcher.fetch(url, etag=etag, last_modified=last_modified)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.fetcher.aclose(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
