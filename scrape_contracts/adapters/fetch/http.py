"""``HttpFetcher``: the policy's steps performed with a blocking ``httpx.Client``."""

from __future__ import annotations

import time
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.client import HttpFetcherBase, default_ssl_context
from scrape_contracts.adapters.fetch.connect import pinned_to
from scrape_contracts.adapters.fetch.deadline import deadline_within
from scrape_contracts.adapters.fetch.page import ClosesOnExit, Page
from scrape_contracts.adapters.fetch.policy import Exchange, Sleep, Step
from scrape_contracts.adapters.fetch.transport import SyncTransport


class HttpFetcher(HttpFetcherBase, ClosesOnExit):
    """Fetches pages over HTTP(S); safe to share between threads (one pooled httpx.Client)."""

    _default_sleep = staticmethod(time.sleep)

    def _open_client(self, max_connections: int, **options: Any) -> httpx.Client:
        transport = SyncTransport(max_connections=max_connections, ssl_context=default_ssl_context())
        return httpx.Client(transport=transport, **options)

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
        request = self._client.stream("GET", exchange.url, headers=exchange.headers, timeout=exchange.timeout)
        pinned = pinned_to(exchange.url, exchange.addresses)
        with deadline_within(exchange.budget_s), pinned, request as response:
            if exchange.start(response.status_code, response.reason_phrase, response.headers):
                for chunk in response.iter_raw():
                    exchange.feed(chunk)
            elif exchange.drain:
                for _ in response.iter_raw():
                    pass
        return exchange.finish()
