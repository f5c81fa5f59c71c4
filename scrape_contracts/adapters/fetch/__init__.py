"""Fetch one page (over HTTP, rendered in Chromium, or from fixture files) into a ``Page``; sync or async.

Every failure is a ``FetchError`` whose message names the URL (credentials redacted), what went wrong and
what to change in the contract; ``kind`` and ``transient`` let callers decide between "retry later" and
"fix the contract".

Modules: ``page`` (Page, FetchError, the fetcher protocols), ``policy`` (retries, redirects, deadline:
the sans-IO steps both HTTP clients perform), ``exchange`` (one attempt's GET, as a client sends it),
``http`` / ``http_async`` (the two clients, on ``client``),
``transport`` / ``pool`` (their connection pools, and one per proxy of ``adapters/proxies``), ``cookies``
(a cookie jar per site host for the run, consent cookies) and ``deadline`` (the deadline enforced on every socket
operation), ``body`` (inflation, size limit, charsets), ``secrets`` and ``urls`` (credentials kept out
of output), ``messages`` (the wording of failures), ``fixture``, ``browser`` (a package: Chromium
through Playwright behind the address guard), ``factory`` (``fetcher_for``, ``async_fetcher_for``).
"""

from scrape_contracts.adapters.fetch.body import TooLarge, decode_html, read_limited
from scrape_contracts.adapters.fetch.factory import (
    InlineAsyncFetcher,
    MisconfiguredFetcher,
    async_fetcher_for,
    fetcher_for,
)
from scrape_contracts.adapters.fetch.fixture import FixtureFetcher
from scrape_contracts.adapters.fetch.http import HttpFetcher
from scrape_contracts.adapters.fetch.http_async import AsyncHttpFetcher
from scrape_contracts.adapters.fetch.page import AsyncFetcher, Fetcher, FetchError, Page
from scrape_contracts.adapters.fetch.policy import retry_after_seconds
from scrape_contracts.adapters.fetch.secrets import ExpandedHeaders, expand_header_values
from scrape_contracts.adapters.fetch.urls import redact_url

__all__ = [
    "AsyncFetcher",
    "AsyncHttpFetcher",
    "ExpandedHeaders",
    "FetchError",
    "Fetcher",
    "FixtureFetcher",
    "HttpFetcher",
    "InlineAsyncFetcher",
    "MisconfiguredFetcher",
    "Page",
    "TooLarge",
    "async_fetcher_for",
    "decode_html",
    "expand_header_values",
    "fetcher_for",
    "read_limited",
    "redact_url",
    "retry_after_seconds",
]
