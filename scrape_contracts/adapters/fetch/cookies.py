"""Sessions: a cookie jar per site host for one fetcher's life (one run), and the contract's consent cookies.

The jars are the fetcher's, not a client's: a contract with proxies has one client per proxy, and a host's
cookies must reach it whichever proxy carries the request. A jar is per site host (scheme, host, port):
a cookie set by one host is never sent to another, even one its Domain attribute would allow. Nothing is
written to disk, and Set-Cookie is kept out of a page's headers (policy.py), so no cookie reaches an event.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from scrape_contracts.adapters.fetch.robots import host_key


class NoCookies(httpx.Cookies):
    """A client's own jar, which keeps nothing: the fetcher's ``Sessions`` keep the cookies."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class Sessions:
    """``keep``: remember what each host sets; ``cookies``: sent to every host; ``host_cookies``: site host →
    cookies sent to it (both from the first request, a site's own Set-Cookie of the same name wins)."""

    def __init__(self, *, keep: bool = True, cookies: Mapping[str, str] | None = None,
                 host_cookies: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.keep = keep
        self._cookies = dict(cookies or {})
        self._host_cookies = {host_key(h): dict(c) for h, c in (host_cookies or {}).items()}
        self._jars: dict[str, httpx.Cookies] = {}
        self._lock = threading.Lock()

    def _jar(self, url: str) -> httpx.Cookies:
        key = host_key(url)
        with self._lock:
            jar = self._jars.get(key) if self.keep else None
            if jar is None:
                jar = httpx.Cookies()
                hostname = urlsplit(url).hostname or ""
                # the cookie module matches a dotless host ("localhost") as "localhost.local"
                hostname = hostname if "." in hostname else f"{hostname}.local"
                for name, value in {**self._cookies, **self._host_cookies.get(key, {})}.items():
                    jar.set(name, value, domain=hostname, path="/")
                if self.keep:
                    self._jars[key] = jar
            return jar

    def prepare(self, request: httpx.Request) -> None:
        """Add the host's cookies to ``request`` (a Cookie header of the contract's own wins)."""
        jar = self._jar(str(request.url))
        if jar:  # an empty jar adds nothing, and asking it still wraps the request for the cookie module
            jar.set_cookie_header(request)

    def learn(self, response: httpx.Response) -> None:
        headers = response.headers
        # most pages set none: wrapping each response for the cookie module costs CPU for nothing
        if self.keep and ("set-cookie" in headers or "set-cookie2" in headers):
            self._jar(str(response.request.url)).extract_cookies(response)
