"""``fetch:``: how a contract's pages are fetched (fixture files, HTTP, a browser that renders them, or a
hosted scraping provider's job API)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from scrape_contracts.contract.base import Strict, confined
from scrape_contracts.contract.proxies import ProxySettings, cookie_problem, site_host_problem

DEFAULT_USER_AGENT = "scrape-contracts/0.1.0 (+https://pypi.org/project/scrape-contracts/)"


class ClickStep(Strict):
    """A button the browser clicks after the page loaded: a consent banner, a "load more" button."""

    selector: str = Field(description="CSS selector of the element to click (the first visible match).")
    times: int = Field(
        1, ge=1, le=100, description="Click up to this many times, while the element is there."
    )
    optional: bool = Field(
        False,
        description="No such element is fine (a banner shown to some visitors only); else the fetch fails.",
    )

    @field_validator("selector")
    @classmethod
    def _selector_is_css(cls, value: str) -> str:
        return _css_problem("selector", value)


class BrowserSettings(Strict):
    """``fetch.browser``: how the browser adapter renders a page before it is extracted."""

    executable: str | None = Field(
        None, description="Chromium to drive; default $SCRAPE_CONTRACTS_CHROMIUM, else chromium on PATH."
    )
    wait_for: str | None = Field(None, description="CSS selector that must be on the page before it is read.")
    network_idle: bool = Field(False, description="Also wait until no request was in flight for 0.5 s.")
    timeout_s: float = Field(
        20.0, gt=0, le=300, description="Longest wait for wait_for, network idle and each click step."
    )
    clicks: list[ClickStep] = Field(default_factory=list, description="Clicked in order, after loading.")
    pages: int = Field(
        4, ge=1, le=32, description="Pages rendered at once by one browser (a batch worker has one browser)."
    )

    @field_validator("wait_for")
    @classmethod
    def _wait_for_is_css(cls, value: str | None) -> str | None:
        return None if value is None else _css_problem("wait_for", value)


def _css_problem(setting: str, value: str) -> str:
    # Chromium runs these selectors, so they are CSS only (no parsel ::text, no XPath)
    from cssselect import GenericTranslator, SelectorError as CssError

    if "::text" in value or "::attr" in value or value.lstrip().startswith(("/", "(")):
        raise ValueError(f"{setting} {value!r} must be a plain CSS selector (no ::text, ::attr or XPath): "
                         "the browser matches it")
    try:
        GenericTranslator().css_to_xpath(value)
    except CssError as exc:
        raise ValueError(f"{setting} {value!r} is not valid CSS: {exc}") from None
    return value


class ProviderBudget(Strict):
    """``fetch.provider.budget``: what the contract may spend on provider jobs before it pauses."""

    amount: float = Field(gt=0, le=1_000_000, description="Most the jobs may cost in one period.")
    per: Literal["day", "sweep"] = Field(
        "day", description="day: a UTC calendar day; sweep: one launch of the contract's targets (a schedule "
                           "tick, `scrape-contracts run`, an API launch, a backfill).")
    currency: str = Field("USD", min_length=1, max_length=8,
                          description="Only shown: the provider's own currency.")


class ProviderSettings(Strict):
    """``fetch.provider``: how the provider adapter waits for its jobs (docs/providers.md). The provider's URL
    and token come from the environment (SCRAPE_CONTRACTS_PROVIDER_URL, SCRAPE_CONTRACTS_PROVIDER_TOKEN)."""

    poll_interval_s: float = Field(1.0, gt=0, le=300, description="First wait between two polls of a job.")
    max_poll_interval_s: float = Field(
        30.0, gt=0, le=3600,
        description="The wait doubles after each poll up to this (or the provider's Retry-After).")
    budget: ProviderBudget | None = Field(None, description="Spend per day or per sweep; none: no limit.")
    repair: bool = Field(
        False, description="When healing refuses a field, ask the provider for a repair (its own selector "
                           "proposal, charged to the budget); the proposal waits for a person's review.")


class FetchSettings(Strict):
    adapter: Literal["fixture", "http", "browser", "provider"] = "http"
    fixture_dir: str | None = Field(
        None, description="fixture adapter: directory (relative to the contract) holding <host>/<path> pages."
    )
    timeout_s: float = Field(10.0, gt=0, le=300, description="Longest wait for any one network operation.")
    deadline_s: float = Field(
        60.0, gt=0, le=3600,
        description="Wall-clock limit of one fetch: connecting, headers, body, redirects, retries and waits.",
    )
    headers: dict[str, str] = Field(default_factory=dict)
    max_bytes: int = Field(5_000_000, gt=0, description="Responses larger than this are refused.")
    max_redirects: int = Field(5, ge=0, le=20)
    retries: int = Field(2, ge=0, le=10, description="Retries on connection errors, 429 and 5xx.")
    allow_private_addresses: bool = Field(
        False, description="Allow loopback/private/link-local targets (tests and intranet scrapes only)."
    )
    concurrency: int = Field(
        4, ge=1, le=64,
        description="Requests in flight at once per site host, one budget for the whole run (politeness; raise "
                    "it for your own sites).",
    )
    rate: float | None = Field(
        None, gt=0, le=1000,
        description="Requests started per second per site host (default: no limit but concurrency); a robots.txt "
                    "Crawl-delay or Request-rate that asks for less wins.",
    )
    throttle: bool = Field(
        True, description="Back off a site host that answers 429 or 503, fails, or slows down; recover as it answers.")
    robots: Literal["obey", "ignore"] = Field(
        "obey", description="obey: read each site host's robots.txt once per run, fetch no disallowed page, honour "
                            "Crawl-delay; ignore: for sites you own or may crawl regardless.")
    user_agent: str | None = Field(
        None, description=f"The User-Agent sent and matched against robots.txt (default {DEFAULT_USER_AGENT!r}).")
    browser: BrowserSettings | None = Field(
        None, description="browser adapter: wait conditions, click steps, the Chromium to drive."
    )
    provider: ProviderSettings | None = Field(
        None, description="provider adapter: polling and the cost budget (the provider fetches the pages)."
    )
    proxies: list[ProxySettings] = Field(
        default_factory=list, max_length=64,
        description="http and browser adapters: forward proxies the requests go through, rotated by health "
                    "(docs/proxies.md); "
                    "credentials come from the environment variables each names.")
    sticky_proxy: bool | None = Field(
        None, description="Keep each site host on one proxy while it stays healthy (default: when sessions are on).")
    proxy_recheck_s: float = Field(
        30.0, gt=0, le=3600,
        description="How long a quarantined proxy rests before one request re-checks it (doubling while it fails).")
    sessions: bool = Field(
        True, description="Keep the cookies each site host sets for the run (one jar per site host) and send them "
                          "back; never stored. false: no cookie is kept.")
    cookies: dict[str, str] = Field(
        default_factory=dict, description="Cookies sent to every site host from the first request (consent).")
    host_cookies: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Cookies sent to one site host (key: scheme://host[:port]) from the first request.")

    @field_validator("fixture_dir")
    @classmethod
    def _fixture_dir_is_confined(cls, value: str | None, info: ValidationInfo) -> str | None:
        return confined("fetch.fixture_dir", value, info) if info.data.get("adapter") == "fixture" else value

    @model_validator(mode="after")
    def _fixture_dir_for_fixture(self) -> FetchSettings:
        if self.adapter == "fixture" and not self.fixture_dir:
            raise ValueError("the fixture adapter needs fixture_dir")
        if self.adapter == "browser" and self.headers:
            # Chromium keeps request headers set by interception on every redirect hop, whatever its origin:
            # credentials meant for the site could reach another one, so none are sent until that is solved
            raise ValueError("fetch.headers are not sent by the browser adapter (a redirect would carry them "
                             "to other sites); remove them, or use the http adapter for pages that need them")
        header_agent = next((v for k, v in self.headers.items() if k.lower() == "user-agent"), None)
        if header_agent is not None and self.user_agent is not None and header_agent != self.user_agent:
            raise ValueError("fetch.user_agent and fetch.headers.User-Agent differ; keep one of them")
        if self.adapter == "provider" and self.headers:
            raise ValueError("fetch.headers are not sent by the provider adapter (the provider fetches the "
                             "page, with its own headers); remove them")
        if self.provider is not None and self.adapter != "provider":
            raise ValueError(f"fetch.provider is only read by the provider adapter; set `adapter: provider` "
                             f"(now {self.adapter!r}) or remove fetch.provider")
        if self.proxies and self.adapter not in ("http", "browser"):
            raise ValueError(f"fetch.proxies are used by the http and browser adapters (now {self.adapter!r}; "
                             "a provider fetches through its own); remove them or change the adapter")
        if (self.cookies or self.host_cookies) and self.adapter != "http":
            raise ValueError(f"fetch.cookies and fetch.host_cookies are only used by the http adapter (now "
                             f"{self.adapter!r}); remove them or set `adapter: http`")
        names = [p.label for p in self.proxies]
        if len(set(names)) != len(names):
            raise ValueError(f"fetch.proxies names each proxy once (twice: "
                             f"{sorted({n for n in names if names.count(n) > 1})}); give them distinct `name`s")
        if self.browser is not None and self.adapter != "browser":
            raise ValueError(f"fetch.browser is only read by the browser adapter; set `adapter: browser` "
                             f"(now {self.adapter!r}) or remove fetch.browser")
        return self

    @field_validator("user_agent")
    @classmethod
    def _user_agent_is_one_line(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c in value for c in "\r\n")):
            raise ValueError("fetch.user_agent must be one non-empty line, e.g. 'acme-prices/1.0 (+https://acme.example/bot)'")
        return value

    @field_validator("cookies")
    @classmethod
    def _cookies_are_plain(cls, value: dict[str, str]) -> dict[str, str]:
        problem = cookie_problem("fetch.cookies", value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("host_cookies")
    @classmethod
    def _host_cookies_are_plain(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for host, cookies in value.items():
            problem = site_host_problem(host) or cookie_problem(f"fetch.host_cookies[{host!r}]", cookies)
            if problem:
                raise ValueError(problem)
        return value

    @property
    def sticky(self) -> bool:
        """Whether each site host keeps one proxy: asked, or because its cookies are kept."""
        return self.sessions if self.sticky_proxy is None else self.sticky_proxy

    @property
    def agent(self) -> str:
        """The User-Agent sent, and the name robots.txt groups are matched against."""
        header_agent = next((v for k, v in self.headers.items() if k.lower() == "user-agent"), None)
        return self.user_agent or header_agent or DEFAULT_USER_AGENT

    @property
    def provider_settings(self) -> ProviderSettings:
        """``fetch.provider`` or its defaults."""
        return self.provider or ProviderSettings()

    @property
    def browser_settings(self) -> BrowserSettings:
        """``fetch.browser`` or its defaults."""
        return self.browser or BrowserSettings()

