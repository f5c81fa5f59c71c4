"""``fetch.proxies``, ``fetch.cookies`` and ``fetch.host_cookies``: short errors for what cannot work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scrape_contracts.contract.fetch import FetchSettings

PROXY = {"url": "http://proxy:3128"}


@pytest.mark.parametrize("settings, says", [
    ({"adapter": "provider", "proxies": [PROXY]}, "a provider fetches through its own"),
    ({"adapter": "browser", "cookies": {"consent": "yes"}}, "only used by the http adapter"),
    ({"proxies": [{"url": "socks5://proxy:1080"}]}, "SOCKS proxies are not supported"),
    ({"proxies": [{"url": "http://proxy:3128/path"}]}, "only scheme, host and port"),
    ({"proxies": [{"url": "http://proxy:3128", "username_env": "U"}]}, "set both username_env and password_env"),
    ({"proxies": [{"url": "http://proxy:3128", "username_env": "U-1", "password_env": "P"}]},
     "not an environment variable name"),
    ({"proxies": [PROXY, PROXY]}, "names each proxy once"),
    ({"cookies": {"a b": "1"}}, "is not a cookie name"),
    ({"cookies": {"consent": "yes; admin=1"}}, "has a space, quote, comma, semicolon"),
    ({"host_cookies": {"shop.example": {"a": "1"}}}, "must be a site host"),
])
def test_mistakes_are_refused_with_a_short_reason(settings: dict, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        FetchSettings(**settings)
    assert says in str(refused.value)


def test_a_proxy_url_is_kept_as_scheme_host_and_port() -> None:
    fetch = FetchSettings(proxies=[{"url": "http://proxy:3128/"}, {"url": "https://gw:443", "name": "gw"}])
    assert [(p.url, p.label) for p in fetch.proxies] == [("http://proxy:3128", "http://proxy:3128"), ("https://gw:443", "gw")]
    assert fetch.sticky and not FetchSettings(sessions=False).sticky and not FetchSettings(sticky_proxy=False).sticky
