"""docs/providers.md's commands, run as written: reconcile an indeterminate target, list the dead letters,
replay them. Against the stand-in provider (a stand-in for a hosted scraping API, which cannot run here) and
a real instance; the site on 127.0.0.1 is the one the stand-in fetches from."""

from __future__ import annotations

import pytest

from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.defs.provider_setup import ProviderSetup, provider_setup  # noqa: F401
from scrape_contracts_tests.fixture_site import Response
from scrape_contracts_tests.readme import blocks_run_by, run_blocks

pytestmark = pytest.mark.timeout(600)


def test_provider_page_commands(provider_setup: ProviderSetup) -> None:
    setup, provider, store = provider_setup, provider_setup.provider, provider_setup.store
    reconcile, listing, replay = blocks_run_by(__file__, "test_provider_page_commands")
    keys = ["p1", "p2", "p3", "p4"]
    for i, key in enumerate(keys, start=1):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    urls = {key: setup.site.url(f"/p/{i}") for i, key in enumerate(keys, start=1)}
    setup.write("shop", urls, concurrency=1)
    provider.lose_submits = 1  # p1's first job (job-000001): made by the provider, its answer lost
    assert not setup.run_single("shop", "p1").success
    assert store.state("shop", "p1").pause_reason.startswith("indeterminate: ")
    for path in ("/p/3", "/p/4"):
        setup.site.set_handler(path, lambda _request: Response(503, b"maintenance"))
    for _ in range(2):
        assert setup.run_batch("shop", ["p2", "p3", "p4"]).success

    [out] = run_blocks([reconcile], setup.home)
    assert "shop/p1: adopted provider job job-000001" in out and "accepted as v1" in out, out
    assert [s["job_id"] for s in provider.submits()].count("job-000001") == 1
    [out] = run_blocks([listing], setup.home)
    assert out.splitlines()[0] == "shop: 2 target(s) failed their last 2 run(s), for 1 reason(s):", out
    assert "(as fetched by the provider): 2 target(s)" in out and "    p3  2 failed in a row" in out
    for i in (3, 4):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    [out] = run_blocks([replay], setup.home)
    assert "replayed 2 target(s) as one batch" in out and out.rstrip().endswith(
        "shop: no target fails its last 2 run(s) now"), out
    assert {k: store.latest_accepted("shop", k).record["title"] for k in keys} == {
        key: f"Book {i}" for i, key in enumerate(keys, start=1)}
