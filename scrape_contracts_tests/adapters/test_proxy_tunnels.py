"""HTTPS targets through proxies: a real TLS site on loopback, its certificate signed by a CA made for the
test (trusted through ``fetch.ca_file``), reached through a real forward proxy's CONNECT tunnel, both
fetchers; asserted from the proxy's log (the CONNECT, its credentials) and the site's (the pages)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from scrape_contracts.adapters.fetch import FetchError, async_fetcher_for, fetcher_for
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.proxy_site import ForwardProxy, SessionSite, site_certificate, site_context

SECRET = "tunn3l-s3cret"
CREDENTIALS = {"PX_USER": "scraper", "PX_PASS": SECRET}


@pytest.fixture()
def tls_site(tmp_path: Path):
    ca_file, context = site_certificate(tmp_path / "certs")
    with SessionSite(lambda path: product_page(f"Book {path}", "BK-1", "$10.00"), tls=context) as site:
        site.ca_file = str(ca_file.relative_to(tmp_path))  # type: ignore[attr-defined]
        yield site


def _settings(proxy: ForwardProxy, **extra: object) -> FetchSettings:
    return FetchSettings.model_validate({
        "adapter": "http", "allow_private_addresses": True, "retries": 1, "robots": "ignore",
        "proxies": [{"url": proxy.url, "name": proxy.name, "username_env": "PX_USER", "password_env": "PX_PASS"}],
        **extra})


def _shows_no_secret(*things: object) -> None:
    for thing in things:
        assert SECRET not in repr(thing)


@pytest.mark.parametrize("run_path", ["sync", "async"])
def test_an_https_target_goes_through_the_proxys_connect_tunnel_and_the_site_is_verified_with_ca_file(
        tls_site: SessionSite, tmp_path: Path, run_path: str) -> None:
    with ForwardProxy("tunnel", credentials=("scraper", SECRET)) as proxy:
        settings = _settings(proxy, ca_file=tls_site.ca_file)  # type: ignore[attr-defined]
        urls = [tls_site.url("/p/1"), tls_site.url("/p/2")]
        if run_path == "sync":
            with fetcher_for(settings, tmp_path, environ=CREDENTIALS) as fetcher:
                pages = [fetcher.fetch(url) for url in urls]
                health = fetcher.proxy_health()
        else:
            async def main():  # noqa: ANN202
                async with async_fetcher_for(settings, tmp_path, environ=CREDENTIALS) as fetcher:
                    return [await fetcher.fetch(url) for url in urls], fetcher.proxy_health()

            pages, health = asyncio.run(main())
        assert [(p.status, p.proxy) for p in pages] == [(200, "tunnel"), (200, "tunnel")]
        assert "Book /p/2" in pages[1].html
        # one tunnel, kept open for the second page; opened with the credentials, to the site's host and port
        [connect] = proxy.carried()
        assert (connect.method, connect.url, connect.status, connect.authorized) == (
            "CONNECT", f"127.0.0.1:{tls_site.port}", 200, True)
        assert [v.path for v in tls_site.visits] == ["/p/1", "/p/2"]  # the site served both, over TLS
        assert health[0]["requests"] == 2 and not health[0]["quarantined"]
        _shows_no_secret(pages, [p.attempts for p in pages], [p.headers for p in pages], health)


def test_without_its_ca_the_site_is_refused_and_the_proxy_is_not_blamed(tls_site: SessionSite, tmp_path: Path) -> None:
    with ForwardProxy("tunnel") as proxy:
        settings = _settings(proxy).model_copy(update={"proxies": [
            _settings(proxy).proxies[0].model_copy(update={"username_env": None, "password_env": None})]})
        with fetcher_for(settings, tmp_path, environ={}) as fetcher:
            with pytest.raises(FetchError) as refused:
                fetcher.fetch(tls_site.url("/p/1"))
            health = fetcher.proxy_health()
    # said once (another try would be shown the same certificate), with what to do; not the proxy's fault
    assert refused.value.kind == "untrusted_certificate" and not refused.value.transient
    assert "certificate is not trusted" in str(refused.value) and "fetch.ca_file" in str(refused.value)
    assert len(refused.value.attempts) == 1 and refused.value.attempts[0]["proxy"] == "tunnel"
    assert not tls_site.visits  # nothing was served: the fetcher hung up at the certificate
    assert {c.method for c in proxy.carried()} == {"CONNECT"}
    assert not health[0]["quarantined"]  # the proxy did its part: the site's certificate is the site's business


def test_a_connect_refused_for_credentials_names_the_variables_never_the_value(tls_site: SessionSite,
                                                                               tmp_path: Path) -> None:
    with ForwardProxy("tunnel", credentials=("scraper", SECRET)) as proxy:
        settings = _settings(proxy, ca_file=tls_site.ca_file)  # type: ignore[attr-defined]
        with fetcher_for(settings, tmp_path, environ={"PX_USER": "scraper", "PX_PASS": "wrong-" + SECRET}) as fetcher:
            with pytest.raises(FetchError) as denied:
                fetcher.fetch(tls_site.url("/p/1"))
            health = fetcher.proxy_health()
    assert "proxy tunnel answered 407" in str(denied.value) and "CONNECT" in str(denied.value)
    assert "username_env and password_env" in str(denied.value)
    assert [(c.method, c.status, c.authorized) for c in proxy.carried()] == [("CONNECT", 407, False)] * 2
    assert health[0]["quarantined"] and not tls_site.visits
    _shows_no_secret(denied.value, denied.value.attempts, health)


@pytest.mark.parametrize("run_path", ["sync", "async"])
def test_an_https_proxy_carries_a_tunnel_inside_its_own_tls(tls_site: SessionSite, tmp_path: Path,
                                                           run_path: str) -> None:
    # the proxy's certificate is signed by the same test CA: fetch.ca_file is trusted for the proxy too
    with ForwardProxy("tls-proxy", credentials=("scraper", SECRET), tls=site_context(tmp_path / "certs")) as proxy:
        assert proxy.url.startswith("https://")
        settings = _settings(proxy, ca_file=tls_site.ca_file)  # type: ignore[attr-defined]
        if run_path == "sync":
            with fetcher_for(settings, tmp_path, environ=CREDENTIALS) as fetcher:
                page = fetcher.fetch(tls_site.url("/p/1"))
        else:
            async def main():  # noqa: ANN202
                async with async_fetcher_for(settings, tmp_path, environ=CREDENTIALS) as fetcher:
                    return await fetcher.fetch(tls_site.url("/p/1"))

            page = asyncio.run(main())
        assert page.status == 200 and page.proxy == "tls-proxy"
        assert [(c.method, c.authorized) for c in proxy.carried(200)] == [("CONNECT", True)]
        assert [v.path for v in tls_site.visits] == ["/p/1"]


def test_without_a_proxy_ca_file_is_trusted_too_and_its_mistakes_are_named(tls_site: SessionSite,
                                                                          tmp_path: Path) -> None:
    direct = FetchSettings(allow_private_addresses=True, robots="ignore", retries=2)
    with fetcher_for(direct, tmp_path) as fetcher, pytest.raises(FetchError) as refused:
        fetcher.fetch(tls_site.url("/p/1"))
    assert refused.value.kind == "untrusted_certificate" and len(refused.value.attempts) == 1
    trusted = direct.model_copy(update={"ca_file": tls_site.ca_file})  # type: ignore[attr-defined]
    with fetcher_for(trusted, tmp_path) as fetcher:
        assert fetcher.fetch(tls_site.url("/p/1")).status == 200
    assert [v.path for v in tls_site.visits] == ["/p/1"]

    (tmp_path / "not-a-ca.pem").write_text("hello")
    for ca_file, says in (("not-a-ca.pem", "is not a readable PEM file of CA certificates"),
                          ("missing.pem", "No such file"), ("../../../etc/ssl/x.pem", "outside the allowed folders")):
        with fetcher_for(direct.model_copy(update={"ca_file": ca_file}), tmp_path) as fetcher, \
                pytest.raises(FetchError) as wrong:
            fetcher.fetch(tls_site.url("/p/1"))
        assert wrong.value.kind == "invalid_config" and says in str(wrong.value) and "fetch.ca_file" in str(wrong.value)
    assert len(tls_site.visits) == 1


def test_ca_file_is_for_the_http_adapter_and_stays_inside_the_project(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="only used by the http adapter"):
        FetchSettings(adapter="browser", ca_file="ca.pem")
    folder = tmp_path / "project" / "contracts"
    folder.mkdir(parents=True)
    with pytest.raises(ValidationError, match="fetch.ca_file .* outside the allowed folders"):
        FetchSettings.model_validate({"ca_file": "../../elsewhere/ca.pem"}, context={"contract_dir": folder})
    assert FetchSettings.model_validate({"ca_file": "certs/ca.pem"}, context={"contract_dir": folder}).ca_file


def test_through_an_https_proxy_the_sites_certificate_is_the_sites_and_the_proxys_is_the_proxys(
        tls_site: SessionSite, tmp_path: Path) -> None:
    _, other = site_certificate(tmp_path / "other-ca")  # a CA nobody trusts here
    trusted = tls_site.ca_file  # type: ignore[attr-defined]
    with SessionSite(lambda path: "<p>x</p>", tls=other) as stranger, \
            ForwardProxy("tls-proxy", tls=site_context(tmp_path / "certs")) as good_proxy, \
            ForwardProxy("odd-proxy", tls=other) as odd_proxy:
        # the trusted proxy opened the tunnel; the site behind it showed a certificate nobody signed for us
        settings = _settings(good_proxy, ca_file=trusted).model_copy(update={"proxies": [
            _settings(good_proxy).proxies[0].model_copy(update={"username_env": None, "password_env": None})]})
        with fetcher_for(settings, tmp_path, environ={}) as fetcher, pytest.raises(FetchError) as refused:
            fetcher.fetch(stranger.url("/p/1"))
        assert refused.value.kind == "untrusted_certificate" and not fetcher.proxy_health()[0]["quarantined"]
        assert [c.method for c in good_proxy.carried(200)] == ["CONNECT"] and not stranger.visits

        # the proxy itself showed the untrusted certificate: its failure (quarantined), not the site's
        settings = settings.model_copy(update={"proxies": [
            settings.proxies[0].model_copy(update={"url": odd_proxy.url, "name": "odd-proxy"})]})
        with fetcher_for(settings, tmp_path, environ={}) as fetcher, pytest.raises(FetchError) as failed:
            fetcher.fetch(tls_site.url("/p/1"))
        assert failed.value.kind == "connection" and "proxy odd-proxy could not be reached" in str(failed.value)
        assert fetcher.proxy_health()[0]["quarantined"] and not odd_proxy.carried() and not tls_site.visits
