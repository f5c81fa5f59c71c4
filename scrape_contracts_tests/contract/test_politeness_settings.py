"""``fetch:`` politeness settings: defaults, and short errors for what cannot work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scrape_contracts.contract.fetch import DEFAULT_USER_AGENT, FetchSettings


def test_the_defaults_are_a_polite_crawler_s() -> None:
    fetch = FetchSettings()
    assert (fetch.concurrency, fetch.rate, fetch.throttle, fetch.robots) == (4, None, True, "obey")
    assert fetch.agent == DEFAULT_USER_AGENT and DEFAULT_USER_AGENT.startswith("scrape-contracts/")


def test_the_user_agent_comes_from_the_setting_or_the_header() -> None:
    assert FetchSettings(user_agent="acme/1").agent == "acme/1"
    assert FetchSettings(headers={"user-agent": "acme/2"}).agent == "acme/2"
    assert FetchSettings(headers={"User-Agent": "acme/3"}, user_agent="acme/3").agent == "acme/3"


@pytest.mark.parametrize("settings, says", [
    ({"rate": 0}, "greater than 0"),
    ({"robots": "maybe"}, "'obey' or 'ignore'"),
    ({"user_agent": "two\nlines"}, "one non-empty line"),
    ({"user_agent": "a/1", "headers": {"User-Agent": "b/2"}}, "fetch.user_agent and fetch.headers.User-Agent differ"),
])
def test_mistakes_are_refused_with_a_short_reason(settings: dict, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        FetchSettings(**settings)
    assert says in str(refused.value)
