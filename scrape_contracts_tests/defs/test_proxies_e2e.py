"""Proxies and sessions through the real run paths (a batched run with its fetching process, a single-target
run), behind three forward proxies on loopback (one good and asking for credentials, one failing, one slow),
a SOCKS5 proxy, and a CONNECT tunnel to an HTTPS site; proxy health carried from one run to the next;
asserted from the proxies' and the sites' logs; the credentials appear nowhere in the runs' events."""

from __future__ import annotations

import pytest

from scrape_contracts.defs.history import batch_summaries
from scrape_contracts.defs.names import candidate_key
from scrape_contracts.service.forkserver import start_forkserver
from scrape_contracts_tests.conftest import Harness, failure_text, product_page
from scrape_contracts_tests.proxy_site import ForwardProxy, SessionSite, site_certificate
from scrape_contracts_tests.socks_proxy import SUCCEEDED, SocksProxy

pytestmark = pytest.mark.slow

SECRET = "pr0xy-s3cret-value"


def _page(path: str) -> str:
    n = sum(map(ord, path)) % 90
    return product_page(f"Book {path}", f"BK-{n}", f"${10 + n}.00")


def _contract(harness: Harness, name: str, urls: dict[str, str], proxies: list[ForwardProxy], fetch: str) -> None:
    listed = "".join(
        f"    - url: {p.url}\n      name: {p.name}\n"
        + ("      username_env: PX_USER\n      password_env: PX_PASS\n" if p.name == "good" else "")
        for p in proxies)
    path = harness.write_product_contract(name, urls)
    path.write_text(path.read_text().replace("retries: 0", f"retries: 2\n  proxies:\n{listed}{fetch}"))


def _events_text(harness: Harness, run_id: str) -> str:
    return "\n".join(repr(entry) for entry in harness.instance.all_logs(run_id))


def test_a_batch_goes_around_the_failing_proxy_favours_the_fast_one_and_keeps_one_session(
        sqlite_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # the forkserver the workers start from is up before the credentials are set (as in a long-lived
    # process, and as when an earlier test started it): the fetching process still gets them
    start_forkserver()
    monkeypatch.setenv("PX_USER", "scraper")
    monkeypatch.setenv("PX_PASS", SECRET)
    with SessionSite(_page, delay_s=0.05) as site, ForwardProxy("good", credentials=("scraper", SECRET)) as good, \
            ForwardProxy("failing", failing=True) as failing, ForwardProxy("slow", delay_s=0.5) as slow:
        urls = {f"p{i:02d}": site.url(f"/p/{i}") for i in range(30)}
        _contract(sqlite_harness, "shop", urls, [failing, good, slow],
                  "  sticky_proxy: false\n  proxy_recheck_s: 0.2\n  concurrency: 2\n"
                  "  cookies: {consent: \"yes\"}\n")
        result = sqlite_harness.run_batch("shop")
        assert result.success, failure_text(result)
        assert all(sqlite_harness.accepted("shop", key) for key in urls)  # no target lost to a proxy

        # every page reached the site through the good or the slow proxy; the failing one answered 502 to all
        carried = {c.url for c in good.carried(200) + slow.carried(200)}
        assert set(urls.values()) <= carried
        assert failing.carried() and {c.status for c in failing.carried()} == {502}
        assert all(c.authorized for c in good.carried())
        # its score fell with its latency (0.5 s more per answer, by construction): fewer requests than the good one
        assert len(slow.carried()) < len(good.carried())

        [summary] = batch_summaries(sqlite_harness.instance, "shop", [result.run_id])
        proxies = {p["proxy"]: p for p in summary["proxies"]}
        assert proxies["failing"]["quarantined"] and proxies["failing"]["quarantines"] >= 2
        # re-checked after its rest (0.2 s; the sweep lasts longer by construction: 30 pages x 0.05 s / 2 slots),
        # and quarantined again: the proxy saw its quarantine's two requests and the re-checks
        assert proxies["failing"]["rechecks"] >= 1
        assert len(failing.carried()) == proxies["failing"]["requests"] >= 3
        assert not proxies["good"]["quarantined"] and proxies["good"]["requests"] == len(good.carried())

        # one session for the run: robots.txt's answer set it, every later request brought it back, the
        # consent cookie came from the first request on
        first, *later = site.visits
        assert first.path == "/robots.txt" and first.cookie == "consent=yes" and first.set_cookie
        sid = first.set_cookie.split(";")[0]
        assert all(v.cookie == f"consent=yes; {sid}" and not v.set_cookie for v in later)

        events = _events_text(sqlite_harness, result.run_id)
        assert SECRET not in events and "sid=" not in events and "good" in events

        # scrape/_health shows each proxy as the run left it
        health = sqlite_harness.definitions().resolve_job_def("health_job").execute_in_process(
            instance=sqlite_harness.instance)
        [materialisation] = health.get_asset_materialization_events()
        metadata = materialisation.event_specific_data.materialization.metadata
        [row] = metadata["summary"].value
        assert [(p["proxy"], p["quarantined"], p["run_id"]) for p in row["proxies"]] == [
            ("failing", True, result.run_id), ("good", False, result.run_id), ("slow", False, result.run_id)]
        assert "failing quarantined" in metadata["contracts"].value and metadata["proxies_quarantined"].value == 1
        assert SECRET not in _events_text(sqlite_harness, health.run_id)


def test_a_single_target_run_retries_through_another_proxy_and_says_which_carried_the_page(
        sqlite_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # the forkserver the workers start from is up before the credentials are set (as in a long-lived
    # process, and as when an earlier test started it): the fetching process still gets them
    start_forkserver()
    monkeypatch.setenv("PX_USER", "scraper")
    monkeypatch.setenv("PX_PASS", SECRET)
    with SessionSite(_page) as site, ForwardProxy("good", credentials=("scraper", SECRET)) as good, \
            ForwardProxy("failing", failing=True) as failing, ForwardProxy("slow", delay_s=0.5) as slow:
        _contract(sqlite_harness, "shop", {"p1": site.url("/p/1")}, [failing, good, slow],
                  f"  robots: ignore\n  host_cookies: {{\"{site.url('')}\": {{region: eu}}}}\n")
        result = sqlite_harness.run("shop", "p1")
        assert result.success, failure_text(result)
        assert sqlite_harness.accepted("shop", "p1")
        # the first attempt went through the first proxy, which failed; the retry through the next one
        assert [c.url for c in failing.carried()] == [site.url("/p/1")]
        assert [c.url for c in good.carried(200)] == [site.url("/p/1")] and not slow.carried()
        assert [v.cookie for v in site.visits] == ["region=eu"]

        [materialisation] = [e.event_specific_data.materialization for e in result.all_events
                             if e.is_step_materialization
                             and e.event_specific_data.materialization.asset_key == candidate_key("shop")]
        assert materialisation.metadata["proxy"].value == "good"
        events = _events_text(sqlite_harness, result.run_id)
        assert SECRET not in events and "'proxy': 'failing'" in events  # the failed attempt's record says so


def test_a_proxy_a_single_target_run_quarantined_gets_nothing_from_the_next_batch_and_health_says_so(
        sqlite_harness: Harness) -> None:
    with SessionSite(_page) as site, ForwardProxy("locked", credentials=("someone", "else")) as locked, \
            ForwardProxy("open") as open_:
        urls = {f"p{i}": site.url(f"/p/{i}") for i in range(4)}
        _contract(sqlite_harness, "shop", urls, [locked, open_], "  robots: ignore\n  proxy_recheck_s: 300\n")
        single = sqlite_harness.run("shop", "p0")
        assert single.success, failure_text(single)
        assert [c.status for c in locked.carried()] == [407]  # asked for credentials: quarantined at once

        batch = sqlite_harness.run_batch("shop")
        assert batch.success, failure_text(batch)
        # the batch's pool started from what the single-target run left in the project store: still resting
        assert [c.status for c in locked.carried()] == [407]
        assert {c.url for c in open_.carried(200)} == set(urls.values())

        health = sqlite_harness.definitions().resolve_job_def("health_job").execute_in_process(
            instance=sqlite_harness.instance)
        [materialisation] = health.get_asset_materialization_events()
        [row] = materialisation.event_specific_data.materialization.metadata["summary"].value
        shown = {p["proxy"]: p for p in row["proxies"]}
        assert shown["locked"]["quarantined"] and 0 < shown["locked"]["recheck_in_s"] <= 300
        assert shown["locked"]["run_id"] == shown["open"]["run_id"] == batch.run_id
        assert not shown["open"]["quarantined"] and shown["open"]["requests"] == 4


def test_a_socks5_proxy_carries_both_run_paths_and_its_credentials_never_show(
        sqlite_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    start_forkserver()  # up before the credentials are set: the fetching process still gets them
    monkeypatch.setenv("PX_USER", "scraper")
    monkeypatch.setenv("PX_PASS", SECRET)
    with SessionSite(_page) as site, SocksProxy("good", credentials=("scraper", SECRET)) as socks:
        urls = {f"p{i}": site.url(f"/p/{i}") for i in range(5)}
        _contract(sqlite_harness, "shop", urls, [socks], "  robots: ignore\n")  # type: ignore[list-item]
        single = sqlite_harness.run("shop", "p0")
        assert single.success, failure_text(single)
        assert [(t.authorized, t.reply) for t in socks.tunnels()] == [(True, SUCCEEDED)]
        batch = sqlite_harness.run_batch("shop")
        assert batch.success, failure_text(batch)
        assert all(sqlite_harness.accepted("shop", key) for key in urls)
        # every tunnel authenticated, to the site; the site saw the single run's page, then the batch's five
        assert {(t.destination, t.authorized, t.reply) for t in socks.tunnels()} == {
            (f"127.0.0.1:{site.port}", True, SUCCEEDED)}
        assert sorted(v.path for v in site.visits) == sorted(["/p/0", *(f"/p/{i}" for i in range(5))])
        for run in (single, batch):
            assert SECRET not in _events_text(sqlite_harness, run.run_id)


def test_https_targets_go_through_the_proxys_tunnel_in_both_run_paths_trusting_the_contracts_ca(
        sqlite_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    start_forkserver()  # up before the credentials are set: the fetching process still gets them
    monkeypatch.setenv("PX_USER", "scraper")
    monkeypatch.setenv("PX_PASS", SECRET)
    _, tls = site_certificate(sqlite_harness.contracts_dir / "certs")  # the CA file beside the contract
    with SessionSite(_page, tls=tls) as site, \
            ForwardProxy("good", credentials=("scraper", SECRET)) as proxy:
        urls = {f"p{i}": site.url(f"/p/{i}") for i in range(4)}
        _contract(sqlite_harness, "shop", urls, [proxy], "  robots: ignore\n  ca_file: certs/test-ca.pem\n")
        single = sqlite_harness.run("shop", "p0")
        assert single.success, failure_text(single)
        batch = sqlite_harness.run_batch("shop")
        assert batch.success, failure_text(batch)
        assert all(sqlite_harness.accepted("shop", key) for key in urls)
        # only tunnels, each opened with the credentials, to the site's host and port; the site served the pages
        assert {(c.method, c.url, c.status, c.authorized) for c in proxy.carried()} == {
            ("CONNECT", f"127.0.0.1:{site.port}", 200, True)}
        assert sorted(v.path for v in site.visits) == sorted(["/p/0", *(f"/p/{i}" for i in range(4))])
        for run in (single, batch):
            assert SECRET not in _events_text(sqlite_harness, run.run_id)
