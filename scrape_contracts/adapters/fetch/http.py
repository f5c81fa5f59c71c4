"""``HttpFetcher``: the policy's steps performed with a blocking ``httpx.Client``."""

from __future__ import annotations

import time
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.body import CHUNK
from scrape_contracts.adapters.fetch.client import HttpFetcherBase, default_ssl_context
from scrape_contracts.adapters.fetch.page import ClosesOnExit, Page
from scrape_contracts.adapters.fetch.policy import Exchange, Sleep, Step


class HttpFetcher(HttpFetcherBase, ClosesOnExit):
    """Fetches pages over HTTP(S); safe to share between threads (one pooled httpx.Client)."""

    _default_sleep = staticmethod(time.sleep)

    def _open_client(self, max_connections: int, **options: Any) -> httpx.Client:
        # every connection the pool may open is worth keeping: the next fetch to that host reuses it
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        return httpx.Client(limits=limits, verify=default_ssl_context(), **options)

    def close(self) -> None:
        self._client.close()

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        plan = self.policy.plan(url, etag, last_modified)
        for step in plan:
            with plan.capture():
                plan.result = self._perform(step)
        return plan.page

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Exchange):
            return self._exchange(step)
        if isinstance(step, Sleep):
            return self._sleep(step.seconds)
        return self._guard.check(step.url)

    def _exchange(self, exchange: Exchange) -> Any:
        with self._client.stream(
            "GET", exchange.url, headers=exchange.headers, timeout=exchange.timeout
        ) as response:
            if exchange.start(response.status_code, response.reason_phrase, response.headers):
                for chunk in response.iter_raw(CHUNK) if exchange.raw else response.iter_bytes(CHUNK):
                    exchange.feed(chunk)
        return exchange.finish()
