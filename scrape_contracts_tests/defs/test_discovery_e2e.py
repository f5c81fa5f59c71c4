"""Discovery (issue 24): scrape/C/targets reads sitemaps and listing pages on real local servers, adds the
targets it finds to the contract's partitions, marks the ones that disappeared gone and brings them back, and
the next sweep scrapes what it found; every behaviour asserted from the server's request log."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from scrape_contracts import read_accepted
from scrape_contracts.api import FrontDoor
from scrape_contracts.cli import main
from scrape_contracts.defs.names import (
    batch_job_name, candidate_key, discover_job_name, discover_schedule_name, targets_key,
)
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts_tests.conftest import Harness, failure_text, product_page
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response
from scrape_contracts_tests.proxy_site import ForwardProxy
from scrape_contracts_tests.readme import blocks_run_by, project_folder, run_blocks

GZIP = {"Content-Type": "application/x-gzip"}


def urlset(site: FixtureSite, paths: dict[str, str | None]) -> str:
    """A sitemap of ``paths`` (path → lastmod or None) on ``site``."""
    entries = "".join(f"<url><loc>{site.url(p) if p.startswith('/') else p}</loc>"
                      + (f"<lastmod>{m}</lastmod>" if m else "") + "</url>" for p, m in paths.items())
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>')


def index(locs: list[str]) -> str:
    entries = "".join(f"<sitemap><loc>{loc}</loc><lastmod>2026-05-01</lastmod></sitemap>" for loc in locs)
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>')


def discover_block(body: str) -> str:
    return "discover:\n" + body


def discover(harness: Harness, contract: str) -> dg.ExecuteInProcessResult:
    job = harness.definitions().resolve_job_def(discover_job_name(contract))
    return job.execute_in_process(instance=harness.instance, raise_on_error=False)


def sweep(harness: Harness, contract: str) -> dg.ExecuteInProcessResult:
    """What a schedule tick or `scrape-contracts run` does for a batch: every target not skipped."""
    job = harness.definitions().resolve_job_def(batch_job_name(contract))
    every = {"ops": {f"{contract}_scrape_batch": {"config": {"partitions": []}}}}
    return job.execute_in_process(run_config=every, instance=harness.instance, raise_on_error=False)


def metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    (event,) = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def paths_requested(site: FixtureSite) -> list[str]:
    """What the site was asked for, robots.txt aside (read once per host per run: docs/politeness.md)."""
    return [r.path for r in site.requests if r.path != "/robots.txt"]


def serve_products(site: FixtureSite, numbers: range) -> None:
    for i in numbers:
        site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))


def partitions(harness: Harness, contract: str) -> set[str]:
    return set(harness.instance.get_dynamic_partitions(dynamic_partitions_name(contract)))


def test_a_sitemap_index_with_two_gzip_sitemaps_becomes_partitions_the_next_sweep_scrapes(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/sitemap_index.xml", index([site.url("/sitemaps/a.xml.gz"),
                                               site.url("/sitemaps/b.xml.gz")]))
    site.set_page("/sitemaps/a.xml.gz", gzip.compress(urlset(site, {
        "/p/1": "2026-04-01", "/p/2": "2026-04-02T10:00:00+02:00"}).encode()), headers=GZIP)
    site.set_page("/sitemaps/b.xml.gz", gzip.compress(urlset(site, {
        "/p/3": None, "/about": None, "http://other.example/p/9": None}).encode()), headers=GZIP)
    serve_products(site, range(1, 4))
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  sitemaps:\n    - {{url: "{site.url("/sitemap_index.xml")}", keep: "/p/\\\\d+$"}}\n'
        '  skip_unchanged: true\n'))
    defs = harness.definitions()
    # in the asset graph: upstream of the candidate, with its own job and schedule
    graph = defs.resolve_asset_graph()
    assert targets_key("shop") in graph.get(candidate_key("shop")).parent_keys
    assert defs.resolve_schedule_def(discover_schedule_name("shop")).job_name == discover_job_name("shop")

    found = discover(harness, "shop")

    assert found.success, failure_text(found)
    # the index and each gzip sitemap, once each; no product page is fetched by discovery
    assert sorted(paths_requested(site)) == ["/sitemap_index.xml", "/sitemaps/a.xml.gz", "/sitemaps/b.xml.gz"]
    data = metadata(found)
    assert (data["targets"], data["new"], data["gone"], data["ignored"], data["refused"]) == (3, 3, 0, 1, 1)
    (refused,) = data["refused_urls"]
    assert "other.example" in refused and "not the host of a source" in refused
    urls = {t.url: t for t in harness.store.known_targets("shop").values()}
    assert set(urls) == {site.url(f"/p/{i}") for i in (1, 2, 3)}
    assert all(t.source == site.url("/sitemap_index.xml") for t in urls.values())
    utc = dt.timezone.utc  # each sitemap entry's lastmod, read from inside the gzip
    assert [urls[site.url(f"/p/{i}")].lastmod for i in (1, 2, 3)] == [
        dt.datetime(2026, 4, 1, tzinfo=utc), dt.datetime(2026, 4, 2, 8, tzinfo=utc), None]
    assert set(harness.store.list_targets("shop")) == partitions(harness, "shop")

    site.requests.clear()
    swept = sweep(harness, "shop")

    assert swept.success
    assert sorted(paths_requested(site)) == ["/p/1", "/p/2", "/p/3"]
    frame = read_accepted("shop")
    assert sorted(frame["sku"]) == ["BK-1", "BK-2", "BK-3"] and not frame["_gone"].any()



def conditional(site: FixtureSite, path: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    """Serve ``body`` at ``path`` with an ETag, answering 304 to a request that names it (as web servers do)."""
    etag = f'"{hashlib.sha256(body).hexdigest()[:12]}"'

    def answer(request: Request) -> Response:
        if request.headers.get("if-none-match") == etag:
            return Response(304, b"", {"ETag": etag})
        return Response(200, body, {"ETag": etag, **(headers or {})})

    site.set_handler(path, answer)


def test_unchanged_sitemaps_are_asked_for_conditionally_and_a_304_still_lists_their_targets(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    conditional(site, "/sitemap_index.xml", index([site.url("/sitemaps/a.xml.gz"),
                                                   site.url("/sitemaps/b.xml.gz")]).encode())
    conditional(site, "/sitemaps/a.xml.gz", gzip.compress(urlset(site, {"/p/1": None, "/p/2": None}).encode()),
                GZIP)
    conditional(site, "/sitemaps/b.xml.gz", gzip.compress(urlset(site, {"/p/3": None}).encode()), GZIP)
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  sitemaps: ["{site.url("/sitemap_index.xml")}"]\n'))
    first = discover(harness, "shop")
    assert first.success and metadata(first)["new"] == 3
    assert all("if-none-match" not in r.headers for r in site.requests)

    site.requests.clear()
    again = discover(harness, "shop")

    assert again.success, failure_text(again)
    asked = [r for r in site.requests if r.path != "/robots.txt"]
    assert sorted(r.path for r in asked) == ["/sitemap_index.xml", "/sitemaps/a.xml.gz", "/sitemaps/b.xml.gz"]
    assert all(r.headers.get("if-none-match") for r in asked)  # each with the validator it was given
    data = metadata(again)
    assert (data["targets"], data["new"], data["gone"]) == (3, 0, 0)
    [source] = data["sources"]
    assert source["not_modified"] == 3 and source["complete"]

    # one sitemap changes: only it is read in full, and what it no longer lists is gone
    conditional(site, "/sitemaps/b.xml.gz", gzip.compress(urlset(site, {"/p/4": None}).encode()), GZIP)
    site.requests.clear()
    changed = discover(harness, "shop")
    assert changed.success
    data = metadata(changed)
    assert (data["new"], data["gone"], data["sources"][0]["not_modified"]) == (1, 1, 2)
    assert {t.url for t in harness.store.known_targets("shop").values() if t.gone_at is None} == \
        {site.url(f"/p/{i}") for i in (1, 2, 4)}


def test_a_robots_txt_as_a_source_is_read_for_its_sitemap_lines(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/robots.txt", "User-agent: *\nDisallow: /private/\n"
                                 f"Sitemap: {site.url('/sitemaps/a.xml')}\nSitemap: http://other.example/s.xml\n"
                                 f"Sitemap: {site.url('/sitemaps/b.xml.gz')}\n")
    site.set_page("/sitemaps/a.xml", urlset(site, {"/p/1": "2026-04-01", "/p/2": None}))
    site.set_page("/sitemaps/b.xml.gz", gzip.compress(urlset(site, {"/p/3": None}).encode()), headers=GZIP)
    serve_products(site, range(1, 4))
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  sitemaps: ["{site.url("/robots.txt")}"]\n'))

    found = discover(harness, "shop")

    assert found.success, failure_text(found)
    assert sorted(r.path for r in site.requests if r.path != "/robots.txt") == ["/sitemaps/a.xml",
                                                                                "/sitemaps/b.xml.gz"]
    data = metadata(found)
    assert (data["targets"], data["new"]) == (3, 3)
    assert any("other.example" in p and "not the host of a source" in p
               for s in data["sources"] for p in s["problems"]), data["sources"]
    assert {t.url for t in harness.store.known_targets("shop").values()} == {site.url(f"/p/{i}") for i in (1, 2, 3)}

    # a robots.txt that names no sitemap: the run says so, and nothing is marked gone
    site.set_page("/robots.txt", "User-agent: *\nDisallow:\n")
    empty = discover(harness, "shop")
    assert not empty.success and "robots.txt' lists no Sitemap: line; name the sitemap itself" in \
        failure_text(empty), failure_text(empty)
    assert harness.store.gone_targets("shop") == {} and len(harness.store.known_targets("shop")) == 3


LISTING_1 = """<html><body><nav><a href="/about">About</a> <a href="/c/shoes">Shoes</a></nav><main>
<a class="product" href="/p/1">One</a> <a class="product" href="/p/2#reviews">Two</a>
<a class="sub" href="/c/boots">Boots</a> <a class="product" href="http://other.example/p/7">Elsewhere</a>
<a class="product" href="javascript:void(0)">Quick view</a></main>
<a rel="next" href="/c/shoes?page=2">Next</a></body></html>"""
LISTING_2 = """<html><body><main><a class="product" href="/p/3">Three</a>
<a class="product" href="/p/1">One</a></main></body></html>"""
BOOTS = """<html><body><main><a class="product" href="/p/4">Four</a>
<a class="sub" href="/c/boots/deeper">Deeper</a></main></body></html>"""


def test_a_listing_is_followed_through_its_pages_and_one_level_down_and_the_rest_is_ignored(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/c/shoes", LISTING_1)
    site.set_page("/c/shoes?page=2", LISTING_2)
    site.set_page("/c/boots", BOOTS)
    site.set_page("/c/boots/deeper", '<a class="product" href="/p/5">Five</a>')
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  listings:\n    - url: "{site.url("/c/shoes")}"\n      follow: "a.product, a.sub"\n'
        '      keep: "/p/\\\\d+$"\n      next: "a[rel=next]"\n      depth: 1\n'))

    found = discover(harness, "shop")

    assert found.success, failure_text(found)
    # both pages of the listing and the one listing a level down; not the nav, not two levels down
    assert sorted(paths_requested(site)) == ["/c/boots", "/c/shoes", "/c/shoes?page=2"]
    assert {t.url for t in harness.store.known_targets("shop").values()} == {
        site.url(f"/p/{i}") for i in (1, 2, 3, 4)}  # /p/2#reviews is /p/2; /p/1 counted once
    data = metadata(found)
    # ignored: the listing two levels down; refused: the other host (a javascript: link is no link at all)
    assert (data["new"], data["ignored"], data["refused"], data["complete"]) == (4, 1, 1, True)


def test_a_url_outside_the_allowed_addresses_is_never_fetched(sqlite_harness: Harness,
                                                               site: FixtureSite) -> None:
    harness = sqlite_harness
    # without allow_private_addresses the loopback site itself is refused, before any request
    harness.write("closed.yaml", f"""
        name: closed
        fetch: {{adapter: http, retries: 0}}
        fields: {{title: {{selector: "h1"}}}}
        discover:
          sitemaps: ["{site.url('/sitemap.xml')}"]
        """)
    site.set_page("/sitemap.xml", urlset(site, {"/p/1": None}))
    refused = discover(harness, "closed")
    assert not refused.success
    assert "127.0.0.1 is a loopback address" in failure_text(refused), failure_text(refused)
    assert paths_requested(site) == []

    # allowed: a child sitemap on a cloud metadata address, one with a password in its URL and one that
    # redirects to the metadata address are refused; the guard stops the redirect's hop
    port = site.base_url.rsplit(":", 1)[1]
    site.set_page("/index.xml", index([
        "http://169.254.169.254/latest/sitemap.xml", f"http://user:hunter2@127.0.0.1:{port}/private.xml",
        site.url("/moved.xml"), site.url("/sitemap.xml")]))
    site.set_page("/moved.xml", "", status=302, headers={"Location": "http://169.254.169.254/latest/s.xml"})
    site.set_page("/private.xml", urlset(site, {"/p/2": None}))
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  sitemaps: ["{site.url("/index.xml")}"]\n  hosts: ["169.254.169.254"]\n'))
    serve_products(site, range(1, 3))

    found = discover(harness, "shop")

    assert found.success, failure_text(found)
    assert paths_requested(site) == ["/index.xml", "/moved.xml", "/sitemap.xml"]  # not /private.xml
    data = metadata(found)
    problems = " ".join(p for s in data["sources"] for p in s["problems"])
    assert "a cloud metadata address" in problems and "user name or password" in problems
    assert "169.254.169.254" in problems and "hunter2" not in str(data)
    assert data["complete"] is False  # what it found is added; nothing could be marked gone
    assert {t.url for t in harness.store.known_targets("shop").values()} == {site.url("/p/1")}


def test_a_target_gone_from_its_sitemap_keeps_its_data_flagged_is_not_swept_and_comes_back(
        harness: Harness, site: FixtureSite) -> None:
    serve_products(site, range(1, 3))
    site.set_page("/sitemap.xml", urlset(site, {"/p/1": None, "/p/2": None}))
    extra = 'schedule: {cron: "0 6 * * *"}\nowners: [team:shop]\n'
    harness.write_product_contract("shop", dynamic=True, extra=extra + discover_block(
        f'  sitemaps: ["{site.url("/sitemap.xml")}"]\n'))
    harness.store.add_targets("shop", {"by-hand": site.url("/p/1?by=hand")})  # never marked gone
    site.set_page("/p/1?by=hand", product_page("Hand", "BK-H", "$5.00"))
    assert discover(harness, "shop").success
    harness.instance.add_dynamic_partitions(dynamic_partitions_name("shop"), ["by-hand"])
    assert sweep(harness, "shop").success
    (two,) = [k for k, t in harness.store.known_targets("shop").items() if t.url == site.url("/p/2")]

    site.set_page("/sitemap.xml", urlset(site, {"/p/1": None}))
    gone = discover(harness, "shop")
    assert gone.success and metadata(gone)["gone"] == 1 and metadata(gone)["changes"]["gone"] == [two]
    assert set(harness.store.gone_targets("shop")) == {two}
    assert two in partitions(harness, "shop")  # not deleted
    frame = read_accepted("shop").set_index("partition")
    assert frame.loc[two, "sku"] == "BK-2" and bool(frame.loc[two, "_gone"]) is True
    assert not frame.drop(index=two)["_gone"].any()
    exported = harness.contracts_dir.parent / "shop.jsonl"  # export data flags it as read_accepted does
    assert main(["--contracts-dir", str(harness.contracts_dir), "export", "data", "shop", "--out",
                 str(exported)]) == 0
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {r["partition"]: r["_gone"] for r in rows} == {k: k == two for k in frame.index}
    site.requests.clear()
    assert sweep(harness, "shop").success
    assert sorted(paths_requested(site)) == ["/p/1", "/p/1?by=hand"]  # the gone target is skipped
    # a tick of the contract's schedule leaves it out too
    assert sorted(scheduled(harness, "shop")) == sorted(partitions(harness, "shop") - {two})
    door = FrontDoor(contracts_dir=harness.contracts_dir, db_url=harness.backend.db_url,
                     instance=harness.instance)
    statuses = {t.key: t for t in door.get_contract(door.authenticate(door.tokens.create("shop", "read")[1]),
                                                    "shop").targets}
    assert statuses[two].gone_since is not None and statuses["by-hand"].gone_since is None  # the API says so

    # a sitemap that fails marks nothing gone
    site.set_page("/sitemap.xml", "busy", status=503)
    failed = discover(harness, "shop")
    assert not failed.success and set(harness.store.gone_targets("shop")) == {two}

    site.set_page("/sitemap.xml", urlset(site, {"/p/1": None, "/p/2": None}))
    back = discover(harness, "shop")
    assert back.success and metadata(back)["changes"]["back"] == [two]
    assert harness.store.gone_targets("shop") == {}
    site.requests.clear()
    assert sweep(harness, "shop").success
    assert sorted(paths_requested(site)) == ["/p/1", "/p/1?by=hand", "/p/2"]
    assert not read_accepted("shop")["_gone"].any()


def scheduled(harness: Harness, contract: str) -> list[str]:
    """The targets a tick of the contract's schedule would scrape."""
    defs = harness.definitions()
    tick = dt.datetime(2026, 5, 1, 6, tzinfo=dt.timezone.utc)
    schedule = defs.resolve_schedule_def(f"scrape_{contract}_schedule")
    with dg.build_schedule_context(instance=harness.instance, scheduled_execution_time=tick,
                                   resources=defs.resources,
                                   repository_def=defs.get_repository_def()) as context:
        requests = schedule.evaluate_tick(context).run_requests
    op = f"{contract}_scrape_batch"
    return [key for r in requests for key in r.run_config["ops"][op]["config"]["partitions"]]


def test_skip_unchanged_leaves_targets_whose_lastmod_did_not_move_out_of_the_sweep(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    serve_products(site, range(1, 3))
    site.set_page("/sitemap.xml", urlset(site, {"/p/1": "2020-01-01", "/p/2": "2020-01-01"}))
    harness.write_product_contract("shop", dynamic=True, extra=discover_block(
        f'  sitemaps: ["{site.url("/sitemap.xml")}"]\n  skip_unchanged: true\n'))
    assert discover(harness, "shop").success
    assert sweep(harness, "shop").success  # never scraped: both fetched
    assert sorted(paths_requested(site)) == ["/p/1", "/p/2", "/sitemap.xml"]

    site.set_page("/sitemap.xml", urlset(site, {"/p/1": "2020-01-01", "/p/2": "2099-01-01"}))
    assert discover(harness, "shop").success
    site.requests.clear()
    assert sweep(harness, "shop").success
    assert paths_requested(site) == ["/p/2"]  # /p/1's lastmod is older than its last scrape


def test_the_discovery_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/discovery.md's commands, in a newcomer's shell on a fresh instance: the example's sitemap index
    gives three books (its about page ignored), the first sweep scrapes them, the second skips them all."""
    for name in [k for k in os.environ if k.startswith(("DAGSTER_", "SCRAPE_CONTRACTS_"))]:
        monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry: {enabled: false}\n")
    (output,) = run_blocks(blocks_run_by(__file__, "test_the_discovery_page_runs_as_written"),
                           project_folder(tmp_path), env={"DAGSTER_HOME": str(home)})
    assert "shop: 3 target(s) listed by 1 source(s), 3 fetched: 3 new, 0 back, 0 gone, 1 ignored" in output
    assert output.count("  https://shop.example.com/book/") == 3  # targets list
    assert "accepted 3" in output
    assert output.count("skipped (unchanged: lastmod") == 3 and "nothing to scrape" in output


def test_a_proxy_discovery_quarantined_rests_out_its_quarantine_in_the_next_discovery(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/sitemap.xml", urlset(site, {"/p/1": None, "/p/2": None}))
    with ForwardProxy("locked", credentials=("someone", "else")) as locked, ForwardProxy("good") as good:
        path = harness.write_product_contract("shop", dynamic=True, extra=discover_block(
            f'  sitemaps:\n    - url: "{site.url("/sitemap.xml")}"\n'))
        # the first proxy asks for credentials the contract does not give (407): quarantined for 300 s
        path.write_text(path.read_text().replace("retries: 0", (
            f"retries: 2\n  proxy_recheck_s: 300\n  proxies:\n    - {{name: locked, url: \"{locked.url}\"}}\n"
            f"    - {{name: good, url: \"{good.url}\"}}")))

        first = discover(harness, "shop")
        assert first.success, failure_text(first)
        # its first request (robots.txt, before the sitemap) refused by locked, then retried through good
        assert [c.url for c in locked.carried()] == [site.url("/robots.txt")]
        through_good = len(good.carried())
        second = discover(harness, "shop")
        assert second.success, failure_text(second)

        # the second discovery's pool came from the store: nothing more went to the quarantined proxy
        assert len(locked.carried()) == 1
        assert [c.url for c in good.carried()][through_good:] == [site.url("/robots.txt"), site.url("/sitemap.xml")]
    assert metadata(second)["targets"] == 2
    stored = {row.proxy: row for row in harness.store.proxy_health("shop")}
    assert stored["locked"].quarantined and stored["locked"].run_id == second.run_id
