"""JavaScript pages through Dagster: the example browser contract on a real instance, a real local HTTP
server and the real system Chromium, on the one-target path and in a batch; the same page over plain HTTP
is rejected with the reason."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from scrape_contracts.engine.rendering import BROWSER_HINT
from scrape_contracts.defs.history import batch_summaries, read_trail
from scrape_contracts_tests.browser_site import DEAL, EXAMPLE_CONTRACT, SHOP, require_chromium, serve_deal
from scrape_contracts_tests.conftest import Harness, failed_checks, failure_text
from scrape_contracts_tests.defs.test_batch import run_batch
from scrape_contracts_tests.defs.test_fetch_e2e import stage_metadata
from scrape_contracts_tests.fixture_site import FixtureSite
from scrape_contracts_tests.proxy_site import ForwardProxy

pytestmark = pytest.mark.timeout(180)

PARTITION = "p1"  # stage_metadata reads this partition
EXPECTED = {"title": DEAL["title"], "sku": DEAL["sku"], "price": 11.99}


def write_deal_contract(harness: Harness, urls: dict[str, str], **fetch: Any) -> None:
    """The example contract (examples/browser/deal.yaml) on ``urls``; ``fetch`` overrides its fetch block
    (None drops a key)."""
    contract = yaml.safe_load(EXAMPLE_CONTRACT.read_text())
    contract["targets"] = [{"url": url, "key": key} for key, url in urls.items()]
    merged = {**contract["fetch"], "timeout_s": 5, **fetch}
    contract["fetch"] = {key: value for key, value in merged.items() if value is not None}
    harness.write("deal.yaml", yaml.safe_dump(contract, sort_keys=False))


def test_javascript_page_is_extracted_through_the_browser_adapter(sqlite_harness: Harness,
                                                                  site: FixtureSite) -> None:
    require_chromium()
    harness = sqlite_harness
    write_deal_contract(harness, {PARTITION: serve_deal(site)})

    result = harness.run("deal", PARTITION)

    assert result.success, failure_text(result)
    assert harness.accepted("deal", PARTITION) == EXPECTED
    [fetched] = stage_metadata(harness, "deal", result.run_id, "fetched")
    [attempt] = fetched["attempts"]
    assert attempt["adapter"] == "browser" and attempt["status"] == 200 and attempt["requests_refused"] == []


def test_a_batch_renders_every_target_in_the_browser(sqlite_harness: Harness, site: FixtureSite,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    require_chromium()
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "2")  # two worker processes, one browser each
    harness = sqlite_harness
    deals = {f"d{i}": {"title": f"Deal {i}", "sku": f"BK-{i:04d}", "price": f"${i + 1}.50"} for i in range(4)}
    urls = {key: serve_deal(site, f"/deals/{key}", deal) for key, deal in deals.items()}
    # one page also asks for the cloud metadata address: refused, and said in that target's story
    hostile = (SHOP / "deal.html").read_text().replace(
        "</body>", '<script>fetch("http://169.254.169.254/latest/").catch(() => 0)</script></body>')
    site.set_page("/deals/d3.html", hostile)
    write_deal_contract(harness, urls)

    result = run_batch(harness, "deal")

    assert result.success, failure_text(result)
    for i, key in enumerate(deals):
        assert harness.accepted("deal", key) == {"title": f"Deal {i}", "sku": f"BK-{i:04d}", "price": i + 1.5}
    trail = read_trail(harness.instance, "deal", partition="d3", limit=100)[0]
    [fetched] = [event for event in trail if event.stage == "fetched"]
    assert fetched.metadata["requests_refused"] == [
        {"url": "http://169.254.169.254/latest/", "reason": "host '169.254.169.254' is a cloud metadata address"}]


def test_the_same_page_over_http_yields_nothing_and_says_it_needs_the_browser(sqlite_harness: Harness,
                                                                              site: FixtureSite) -> None:
    harness = sqlite_harness
    write_deal_contract(harness, {PARTITION: serve_deal(site)}, adapter="http", browser=None, retries=0)

    result = harness.run("deal", PARTITION)

    assert harness.accepted("deal", PARTITION) is None
    candidate = harness.store.latest_candidate("deal", PARTITION)
    assert candidate.outcome == "rejected"
    failed = failed_checks(result)
    assert BROWSER_HINT in failed["required_fields_present"]["message"]
    [extracted] = stage_metadata(harness, "deal", result.run_id, "extracted")
    assert extracted["record"] == {"title": None, "sku": None, "price": None}
    assert extracted["hint"] == BROWSER_HINT


def test_missing_chromium_fails_the_fetch_in_one_line_and_keeps_the_accepted_data(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    require_chromium()
    harness = sqlite_harness
    url = serve_deal(site)
    write_deal_contract(harness, {PARTITION: url})
    assert harness.run("deal", PARTITION).success

    contract = yaml.safe_load((harness.contracts_dir / "deal.yaml").read_text())
    write_deal_contract(harness, {PARTITION: url}, browser={**contract["fetch"]["browser"],
                                                            "executable": "/nonexistent/chromium"})
    single = harness.run("deal", PARTITION)
    batch = run_batch(harness, "deal")

    text = failure_text(single)
    assert not single.success and "apt-get install chromium" in text and "Traceback" not in text
    [failed] = stage_metadata(harness, "deal", single.run_id, "fetch_failed")
    assert failed["kind"] == "browser_missing" and "\n" not in failed["error"]
    [batch_failed] = stage_metadata(harness, "deal", batch.run_id, "fetch_failed")
    assert batch_failed["kind"] == "browser_missing"
    assert harness.accepted("deal", PARTITION) == EXPECTED
    assert [v.version for v in harness.store.accepted_history("deal", PARTITION)] == [1]


def test_a_batch_renders_through_the_contracts_proxy_and_its_summary_says_how_it_did(
        sqlite_harness: Harness, site: FixtureSite) -> None:
    require_chromium()
    harness = sqlite_harness
    urls = {f"d{i}": serve_deal(site, f"/deals/d{i}", {**DEAL, "sku": f"BK-{i:04d}"}) for i in range(3)}
    with ForwardProxy("gw") as proxy:
        write_deal_contract(harness, urls, proxies=[{"url": proxy.url, "name": "gw"}])
        result = run_batch(harness, "deal")
        carried = {c.url for c in proxy.carried(200)}

    assert result.success, failure_text(result)
    assert {key: harness.accepted("deal", key)["sku"] for key in urls} == {k: f"BK-{i:04d}" for i, k in
                                                                         enumerate(urls)}
    assert set(urls.values()) <= carried  # every page rendered through the proxy
    assert len(site.requests) == len(proxy.carried())  # and robots.txt too: nothing went around it
    [summary] = batch_summaries(harness.instance, "deal", [result.run_id])
    [gw] = summary["proxies"]
    assert gw["proxy"] == "gw" and gw["requests"] == len(urls) and not gw["quarantined"]
