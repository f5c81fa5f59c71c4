"""Links of a listing page, and which found URL may become a target: pure steps of discovery.

A listing's ``follow`` and ``next`` selectors name links (``a.product``, or ``a.product::attr(href)``, or
XPath); each is resolved against the page (its ``<base href>`` too), made canonical (lower-case scheme and
host, no default port, no ``#fragment``: one page, one target) and kept once, in page order.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from scrape_contracts.engine.extract import base_of, pattern_search
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorBudget, parse_html, select_nodes
from scrape_contracts.engine.urls import UrlParseError, parse_url


def canonical(url: str, base: str | None = None) -> str:
    """``url`` (resolved against ``base``) as the one spelling a target is keyed by; UrlParseError if it is
    no web address."""
    parts = urlsplit(parse_url(url, base))
    return urlunsplit(parts._replace(fragment=""))


def page_links(html: str, page_url: str, selector: str, limits: Limits = DEFAULT_LIMITS) -> list[str]:
    """The links ``selector`` names on the page, canonical, each once. An element gives its ``href``; a
    selected attribute or text is the link itself. Raises LimitExceeded for a selector over its budget."""
    root = parse_html(html)
    base = base_of(root, page_url)
    found: dict[str, None] = {}
    for node in select_nodes(root, selector, SelectorBudget(root, limits.selector_max_cost)):
        value = node.get("href") if hasattr(node, "tag") else str(node)
        if not value:
            continue
        try:
            found.setdefault(canonical(value, base))
        except UrlParseError:
            continue  # javascript:, mailto:, "#": no page to scrape
    return list(found)


def keeps(pattern: str | None, url: str, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Whether ``url`` matches the source's ``keep`` pattern (no pattern keeps every URL); a pattern that
    runs past the regex time limit raises LimitExceeded."""
    return pattern is None or pattern_search(pattern, url, limits.regex_timeout_s) is not None


def host_of(url: str) -> str:
    """The host a URL names, lower-case, with its port when it has one (``shop.example:8080``)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


__all__ = ["LimitExceeded", "canonical", "host_of", "keeps", "page_links"]
