"""robots.txt: read once per site host per run, obeyed by default (``fetch.robots: obey``).

The file is fetched by the fetcher that fetches the pages, so it goes through the same address guard,
redirect and size limits, retries and the host's turn (adapters/fetch/policy.py); Protego parses it. What
an answer means follows RFC 9309 (section 2.3.1), as the big crawlers do:

- 2xx: its rules, for the group matching the contract's user agent (``User-agent: *`` otherwise);
  ``Crawl-delay`` (or ``Request-rate``) becomes the host's least interval between two requests;
- 4xx other than 429 (no file, forbidden), or more redirects than allowed: no rules, every page allowed;
- 429, 5xx, no answer (timeout, refused connection) or an unreadable file: "unreachable", so no page of
  the host is fetched in this run; its targets fail as transient and the next run asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from protego import Protego

from scrape_contracts.adapters.fetch.page import FetchError, Page
from scrape_contracts.adapters.fetch.steps import RobotsRefusal
from scrape_contracts.adapters.fetch.urls import redact_url

_ALLOW_ALL_KINDS = frozenset({"too_many_redirects"})


def robots_url(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, "/robots.txt", "", ""))


# a URL that spells out its scheme's default port is the same site host as one that leaves it out
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def host_key(url: str) -> str:
    """The site host a robots.txt (and a host's budget, its cookies) belongs to: scheme, host and port, the
    scheme's default port left out (``https://shop.example:443`` is ``https://shop.example``)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1].lower()
    default = _DEFAULT_PORTS.get(parts.scheme)
    if default and netloc.endswith(default):
        netloc = netloc[: -len(default)]
    return f"{parts.scheme}://{netloc}"


def is_robots_url(url: str) -> bool:
    return urlsplit(url).path == "/robots.txt"


def sitemaps_in(text: str) -> list[str]:
    """The ``Sitemap:`` lines of a robots.txt, in their order (RFC 9309 leaves them outside the groups)."""
    return list(Protego.parse(text).sitemaps)


@dataclass(frozen=True)
class HostRules:
    """What one host's robots.txt says for one user agent."""

    where: str  # the robots.txt URL
    parser: Protego | None = None  # None: no rules (every page allowed)
    unreachable: str | None = None  # why it could not be read: no page is fetched

    def refusal(self, url: str, agent: str) -> RobotsRefusal | None:
        if self.unreachable is not None:
            return RobotsRefusal("robots_unavailable", f"{self.where} could not be read ({self.unreachable}); "
                                 "robots.txt rules say to fetch nothing from the host until it can be read (RFC "
                                 "9309); the next run asks again, or set fetch.robots: ignore if you may crawl it "
                                 "regardless", transient=True)
        if self.parser is not None and not self.parser.can_fetch(url, agent):
            return RobotsRefusal("robots_disallowed", f"{self.where} disallows it for user agent {agent!r}; "
                                 "remove the target, or set fetch.robots: ignore if you may crawl it regardless")
        return None

    def interval_s(self, agent: str) -> float:
        """The least seconds between two requests that the file asks for (0: none)."""
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(agent) or 0.0
        rate = self.parser.request_rate(agent)
        if rate is not None and rate.requests > 0:
            delay = max(delay, rate.seconds / rate.requests)
        return max(0.0, float(delay))


def rules_from(where: str, outcome: Page | BaseException) -> HostRules:
    """The rules a robots.txt fetch gave: its page, or the error its fetch raised."""
    where = redact_url(where)
    if isinstance(outcome, Page):
        return HostRules(where, Protego.parse(outcome.html or ""))
    if isinstance(outcome, FetchError):
        status = outcome.status
        if outcome.kind == "http_status" and status is not None and 400 <= status < 500 and status != 429:
            return HostRules(where)
        if outcome.kind in _ALLOW_ALL_KINDS:
            return HostRules(where)
        reason = f"HTTP {status}" if outcome.kind == "http_status" and status else outcome.kind.replace("_", " ")
        last = outcome.attempts[-1] if outcome.attempts else {}
        if last.get("proxy") and last.get("error"):  # the proxy's own failure says what to fix (already scrubbed)
            reason = str(last["error"])
        return HostRules(where, unreachable=reason)
    return HostRules(where, unreachable=f"{type(outcome).__name__}: {outcome}"[:200])
