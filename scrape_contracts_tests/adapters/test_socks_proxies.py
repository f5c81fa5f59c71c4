"""SOCKS5 proxies (``socks5://`` in ``fetch.proxies``) in both fetchers: a real SOCKS5 proxy on loopback
(user name and password authentication) in front of a real site, over HTTP and HTTPS, asserted from the
proxy's log (which tunnels, with which credentials) and the site's (which pages)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from scrape_contracts.adapters.fetch import FetchError, async_fetcher_for, fetcher_for
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.proxy_site import ForwardProxy, SessionSite, site_certificate
from scrape_contracts_tests.socks_proxy import GENERAL_FAILURE, SUCCEEDED, SocksProxy

SECRET = "s0cks-s3cret"
CREDENTIALS = {"PX_USER": "scraper", "PX_PASS": SECRET}


def _page(path: str) -> str:
    return product_page(f"Book {path}", "BK-1", "$10.00")


def _settings(*proxies: SocksProxy | ForwardProxy, credentials: bool = True, **extra: object) -> FetchSettings:
    listed = [{"url": p.url, "name": p.name,
               **({"username_env": "PX_USER", "password_env": "PX_PASS"} if credentials else {})} for p in proxies]
    return FetchSettings.model_validate({"adapter": "http", "allow_private_addresses": True, "retries": 2,
                                         "robots": "ignore", "sticky_proxy": False, "proxies": listed, **extra})


def _fetch_all(run_path: str, settings: FetchSettings, base: Path, urls: list[str], environ: dict[str, str]):  # noqa: ANN202
    """The pages (or the FetchError) and the proxies' health, through the sync or the async fetcher."""
    if run_path == "sync":
        with fetcher_for(settings, base, environ=environ) as fetcher:
            try:
                return [fetcher.fetch(u) for u in urls], fetcher.proxy_health()
            except FetchError as exc:
                return exc, fetcher.proxy_health()

    async def main():  # noqa: ANN202
        async with async_fetcher_for(settings, base, environ=environ) as fetcher:
            try:
                return [await fetcher.fetch(u) for u in urls], fetcher.proxy_health()
            except FetchError as exc:
                return exc, fetcher.proxy_health()

    return asyncio.run(main())


@pytest.mark.parametrize("run_path", ["sync", "async"])
def test_http_and_https_targets_go_through_a_socks5_proxy_with_its_credentials(tmp_path: Path, run_path: str) -> None:
    ca_file, context = site_certificate(tmp_path / "certs")
    with SessionSite(_page) as plain, SessionSite(_page, tls=context) as secure, \
            SocksProxy("socks", credentials=("scraper", SECRET)) as socks:
        settings = _settings(socks, ca_file=str(ca_file.relative_to(tmp_path)))
        urls = [plain.url("/p/1"), secure.url("/p/2"), plain.url("/p/3")]
        pages, health = _fetch_all(run_path, settings, tmp_path, urls, CREDENTIALS)
        assert [(p.status, p.proxy) for p in pages] == [(200, "socks")] * 3 and "Book /p/2" in pages[1].html
        # a tunnel per site host (the plain one kept alive for /p/3), each authenticated, to the address asked
        assert sorted((t.destination, t.authorized, t.reply) for t in socks.tunnels()) == sorted([
            (f"127.0.0.1:{plain.port}", True, SUCCEEDED), (f"127.0.0.1:{secure.port}", True, SUCCEEDED)])
        assert [v.path for v in plain.visits] == ["/p/1", "/p/3"] and [v.path for v in secure.visits] == ["/p/2"]
        assert health[0]["requests"] == 3 and not health[0]["quarantined"]
        assert SECRET not in repr([pages, [p.attempts for p in pages], [p.headers for p in pages], health])


@pytest.mark.parametrize("environ, says", [
    ({"PX_USER": "scraper", "PX_PASS": "wrong-" + SECRET}, "Invalid username/password"),
    (None, "NO ACCEPTABLE METHODS"),  # no credentials offered to a proxy that wants them
])
@pytest.mark.parametrize("run_path", ["sync", "async"])
def test_credentials_a_socks5_proxy_refuses_quarantine_it_and_name_the_variables(
        tmp_path: Path, run_path: str, environ: dict[str, str] | None, says: str) -> None:
    with SessionSite(_page) as site, SocksProxy("socks", credentials=("scraper", SECRET)) as socks:
        settings = _settings(socks, credentials=environ is not None).model_copy(update={"retries": 1})
        error, health = _fetch_all(run_path, settings, tmp_path, [site.url("/p/1")], environ or {})
        assert isinstance(error, FetchError) and error.kind == "connection"
        assert "SOCKS5 proxy socks refused the credentials" in str(error) and says in str(error)
        assert "username_env and password_env" in str(error)
        # refused at once (a hard fault): quarantined by the first, the second attempt the fallback's
        assert [t.reply for t in socks.tunnels()] == [-1, -1] and not site.visits
        assert health[0]["quarantined"]
        assert SECRET not in repr([str(error), error.attempts, health])


@pytest.mark.parametrize("run_path", ["sync", "async"])
def test_a_failing_socks5_proxy_is_gone_around_through_the_next_proxy(tmp_path: Path, run_path: str) -> None:
    with SessionSite(_page) as site, SocksProxy("socks", failing=True) as socks, ForwardProxy("http") as http:
        settings = _settings(socks, http, credentials=False)
        pages, health = _fetch_all(run_path, settings, tmp_path, [site.url("/p/1"), site.url("/p/2")], {})
        assert [p.proxy for p in pages] == ["http", "http"]
        assert [a["proxy"] for a in pages[0].attempts] == ["socks", "http"]
        assert "proxy socks refused the tunnel: Proxy Server could not connect: General SOCKS server failure" in \
            pages[0].attempts[0]["error"]
        assert {t.reply for t in socks.tunnels()} == {GENERAL_FAILURE}
        assert [c.url for c in http.carried()] == [site.url("/p/1"), site.url("/p/2")]
        assert [v.path for v in site.visits] == ["/p/1", "/p/2"]
        assert health[0]["failures"] == len(socks.tunnels()) >= 1
