"""``AsyncHttpFetcher``: the policy's steps performed with an ``httpx.AsyncClient``, never blocking the loop.

The address guard is synchronous and resolves host names through its resolver; here that resolver only
hands out answers looked up beforehand on the event loop's executor, so a slow DNS server delays one
fetch, not all of them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.client import HttpFetcherBase
from scrape_contracts.adapters.fetch.connect import pinned_to
from scrape_contracts.adapters.fetch.deadline import deadline_within
from scrape_contracts.adapters.fetch.page import AsyncClosesOnExit, Page
from scrape_contracts.adapters.fetch.pace import Ticket
from scrape_contracts.adapters.fetch.exchange import Exchange
from scrape_contracts.adapters.fetch.steps import CheckAddress, CheckRobots, RobotsRefusal, Sleep, Turn
from scrape_contracts.adapters.fetch.pool import AsyncPool
from scrape_contracts.adapters.fetch.transport import AsyncProxyTransport
from scrape_contracts.adapters.proxies import ProxyEndpoint
from scrape_contracts.adapters.netguard import Resolver, system_resolver
from scrape_contracts.adapters.fetch.robots import host_key, robots_url, rules_from

# (host, addresses) looked up for the guard check under way in this task
_LOOKED_UP: ContextVar[tuple[str, Sequence[str]] | None] = ContextVar("fetch_looked_up", default=None)


class _LookupNeeded(Exception):
    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host


def _looked_up(host: str) -> Sequence[str]:
    found = _LOOKED_UP.get()
    if found is None or found[0] != host:
        raise _LookupNeeded(host)
    return found[1]


async def _resolve_in_executor(host: str) -> Sequence[str]:
    return await asyncio.get_running_loop().run_in_executor(None, system_resolver, host)


class AsyncHttpFetcher(HttpFetcherBase, AsyncClosesOnExit):
    """Fetches pages over HTTP(S) from many tasks of one event loop (one pooled httpx.AsyncClient of
    ``max_connections``). ``resolver`` may be a coroutine function or a plain function that does not block
    (a test's table); the default resolves with ``getaddrinfo`` on the loop's executor."""

    _default_sleep = staticmethod(asyncio.sleep)

    def _guard_resolver(self, resolver: Callable[[str], Any] | None) -> Resolver:
        self._resolve = resolver or _resolve_in_executor
        return _looked_up

    def _open_client(self, max_connections: int, **options: Any) -> httpx.AsyncClient:
        pool = AsyncPool(max_connections=max_connections, ssl_context=self.ssl_context)
        return httpx.AsyncClient(transport=pool, **options)

    def _open_proxy_client(self, proxy: ProxyEndpoint, max_connections: int, **options: Any) -> httpx.AsyncClient:
        transport = AsyncProxyTransport(proxy.url, username=proxy.username, password=proxy.password,
                                        max_connections=max_connections, ssl_context=self.ssl_context)
        return httpx.AsyncClient(transport=transport, **options)

    async def aclose(self) -> None:
        try:
            if self.proxy_book is not None:  # one short write, off the event loop
                await asyncio.get_running_loop().run_in_executor(None, self._save_proxy_health)
        finally:
            for client in self._clients.values():
                await client.aclose()

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        return await self._fetch(url, etag, last_modified, self.robots_agent is not None)

    async def _fetch(self, url: str, etag: str | None, last_modified: str | None, robots: bool) -> Page:
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
                            answer = plan.result = await self._exchange(step)
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
                            held = await self.pacer.take(host)
                            plan.result = self._clock() - asked
                    elif isinstance(step, Sleep):
                        if self.pacer is not None:
                            await self.pacer.pause(host, step.seconds, self._sleep)
                        else:
                            await self._sleep(step.seconds)
                    elif isinstance(step, CheckRobots):
                        plan.result = await self.robots_refusal(step.url)
                    else:
                        plan.result = await self._check_address(step.url)
        finally:
            if held is not None:
                self._give_back(held, None)
        return plan.page

    async def robots_refusal(self, url: str) -> RobotsRefusal | None:
        """Read the host's robots.txt the first time it is needed in this fetcher's life (one run), once."""
        assert self.robots_agent is not None
        key = host_key(url)
        known = self._robots.get(key)
        if known is None:
            known = self._robots[key] = asyncio.get_running_loop().create_future()
            try:
                where = robots_url(url)
                try:
                    outcome: Any = await self._fetch(where, None, None, False)
                except Exception as exc:  # noqa: BLE001 (what it failed with decides the rules)
                    outcome = exc
                rules = rules_from(where, outcome)
                if self.pacer is not None:
                    self.pacer.pace(key).at_least(rules.interval_s(self.robots_agent))
                known.set_result(rules)
            except BaseException:
                del self._robots[key]  # cancelled: whoever comes next reads it
                known.cancel()
                raise
        rules = await asyncio.shield(known)
        return rules.refusal(url, self.robots_agent)

    async def _check_address(self, url: str) -> tuple[str, ...] | None:
        try:
            return self._guard.check(url)
        except _LookupNeeded as needed:
            addresses = self._resolve(needed.host)
            if inspect.isawaitable(addresses):
                addresses = await addresses
            token = _LOOKED_UP.set((needed.host, addresses))
            try:
                return self._guard.check(url)
            finally:
                _LOOKED_UP.reset(token)

    async def _exchange(self, exchange: Exchange) -> Any:
        client, proxy = self._route(exchange)
        request = client.build_request("GET", exchange.url, headers=exchange.headers, timeout=exchange.timeout)
        self.sessions.prepare(request)
        # through a proxy, the only connection is to the proxy: the contract names it, so it is trusted as named
        pinned = pinned_to(exchange.url, exchange.addresses if proxy is None else None)
        with self._carried(proxy) as carried, deadline_within(exchange.budget_s), pinned:
            response = await client.send(request, stream=True)
            try:
                self.sessions.learn(response)
                if proxy is not None:
                    carried.fault = self._proxy_answer(proxy, response.status_code)
                if exchange.start(response.status_code, response.reason_phrase, response.headers):
                    async for chunk in response.aiter_raw():
                        exchange.feed(chunk)
                elif exchange.drain:
                    async for _ in response.aiter_raw():
                        pass
            finally:
                await response.aclose()
            return exchange.finish()
