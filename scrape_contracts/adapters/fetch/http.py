"""``HttpFetcher``: the policy's steps performed with a blocking ``httpx.Client``."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.client import HttpFetcherBase
from scrape_contracts.adapters.fetch.connect import pinned_to
from scrape_contracts.adapters.fetch.deadline import deadline_within
from scrape_contracts.adapters.fetch.page import ClosesOnExit, Page
from scrape_contracts.adapters.fetch.pace import Ticket
from scrape_contracts.adapters.fetch.exchange import Exchange
from scrape_contracts.adapters.fetch.steps import CheckAddress, CheckRobots, RobotsRefusal, Sleep, Turn
from scrape_contracts.adapters.fetch.transport import ProxyTransport, SyncTransport
from scrape_contracts.adapters.proxies import ProxyEndpoint
from scrape_contracts.adapters.fetch.robots import host_key, robots_url, rules_from


class HttpFetcher(HttpFetcherBase, ClosesOnExit):
    """Fetches pages over HTTP(S); safe to share between threads (one pooled httpx.Client)."""

    _default_sleep = staticmethod(time.sleep)

    def __init__(self, **options: Any) -> None:
        self._robots_lock = threading.Lock()
        super().__init__(**options)

    def _open_client(self, max_connections: int, **options: Any) -> httpx.Client:
        transport = SyncTransport(max_connections=max_connections, ssl_context=self.ssl_context)
        return httpx.Client(transport=transport, **options)

    def _open_proxy_client(self, proxy: ProxyEndpoint, max_connections: int, **options: Any) -> httpx.Client:
        transport = ProxyTransport(proxy.url, username=proxy.username, password=proxy.password,
                                   max_connections=max_connections, ssl_context=self.ssl_context)
        return httpx.Client(transport=transport, **options)

    def close(self) -> None:
        try:
            self._save_proxy_health()
        finally:
            for client in self._clients.values():
                client.close()
            if self.pacer is not None:
                self.pacer.close()  # its shared budget's connection, if it has one

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        return self._fetch(url, etag, last_modified, self.robots_agent is not None)

    def _fetch(self, url: str, etag: str | None, last_modified: str | None, robots: bool) -> Page:
        plan = self.policy.plan(url, etag, last_modified, robots=robots)
        held: Ticket | None = None  # the host's slot, from a Turn to the end of its Exchange
        host = ""
        try:
            for step in plan:
                if held is not None and not isinstance(step, (CheckAddress, Exchange)):
                    held = self._give_back(held, None)
                with plan.capture():
                    if isinstance(step, Exchange):
                        answer, about_host = None, True
                        try:
                            answer = plan.result = self._exchange(step)
                        except httpx.ProxyError:
                            about_host = False  # the proxy failed, not the host
                            raise
                        finally:
                            if held is not None:
                                held = self._give_back(held, answer, about_host=about_host)
                    elif isinstance(step, Turn):
                        host = host_key(step.url)
                        if self.pacer is not None:
                            asked = self._clock()
                            held = self.pacer.take(host)
                            plan.result = self._clock() - asked
                    elif isinstance(step, Sleep):
                        if self.pacer is not None:
                            self.pacer.pause(host, step.seconds, self._sleep)
                        else:
                            self._sleep(step.seconds)
                    elif isinstance(step, CheckRobots):
                        plan.result = self.robots_refusal(step.url)
                    else:
                        plan.result = self._guard.check(step.url)
        finally:
            if held is not None:
                self._give_back(held, None)
        return plan.page

    def robots_refusal(self, url: str) -> RobotsRefusal | None:
        """Read the host's robots.txt the first time it is needed in this fetcher's life (one run), once."""
        assert self.robots_agent is not None
        key = host_key(url)
        with self._robots_lock:
            rules = self._robots.get(key)
            if rules is None:
                where = robots_url(url)
                try:
                    outcome: Any = self._fetch(where, None, None, False)
                except Exception as exc:  # noqa: BLE001 (what it failed with decides the rules)
                    outcome = exc
                rules = self._robots[key] = rules_from(where, outcome)
                if self.pacer is not None:
                    self.pacer.pace(key).at_least(rules.interval_s(self.robots_agent))
        return rules.refusal(url, self.robots_agent)

    def _exchange(self, exchange: Exchange) -> Any:
        client, proxy = self._route(exchange)
        request = client.build_request("GET", exchange.url, headers=exchange.headers, timeout=exchange.timeout)
        self.sessions.prepare(request)
        # through a proxy, the only connection is to the proxy: the contract names it, so it is trusted as named
        pinned = pinned_to(exchange.url, exchange.addresses if proxy is None else None)
        with self._carried(proxy) as carried, deadline_within(exchange.budget_s), pinned:
            response = client.send(request, stream=True)
            try:
                self.sessions.learn(response)
                if proxy is not None:
                    carried.fault = self._proxy_answer(proxy, response.status_code)
                if exchange.start(response.status_code, response.reason_phrase, response.headers):
                    for chunk in response.iter_raw():
                        exchange.feed(chunk)
                elif exchange.drain:
                    for _ in response.iter_raw():
                        pass
            finally:
                response.close()
            return exchange.finish()
