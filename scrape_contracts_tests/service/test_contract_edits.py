"""An edited contract takes effect on pages that did not change; an edit that changes nothing costs nothing."""

from __future__ import annotations

from typing import Any

import pytest

from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.defs.test_batch import run_batch


def _without_sku(harness: Harness) -> None:
    path = harness.contracts_dir / "shop.yaml"
    path.write_text(path.read_text().replace('  sku:\n    selector: "#sku"\n', ""))


@pytest.mark.parametrize("path", ["single", "batch"])
def test_added_field_is_extracted_from_an_unchanged_page(sqlite_harness: Harness, site, path: str) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    _without_sku(harness)

    def scrape() -> str:
        result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop")
        assert result.success
        return harness.store.latest_candidate("shop", "p1").outcome

    assert scrape() == "valid"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "price": 100.0}
    # the same page, and the contract gains a field: the stored page is extracted again
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert scrape() == "valid"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 100.0}
    # an edit that does not change extraction keeps the shortcut: unchanged, nothing parsed
    contract = harness.contracts_dir / "shop.yaml"
    contract.write_text(contract.read_text().replace("products served by the test site", "our books"))
    assert scrape() == "unchanged"
    trail = read_trail(harness.instance, "shop", partition="p1", limit=1000)[0]
    last_run = trail[-1].run_id
    stages = [(e.stage, e.metadata) for e in trail if e.run_id == last_run]
    if path == "single":
        assert any(stage == "extracted" and "skipped" in data for stage, data in stages)
    else:  # a batch records unchanged targets in its summary only
        assert [stage for stage, _ in stages] == ["unchanged"]
    assert len(harness.store.accepted_history("shop", "p1")) == 2


@pytest.mark.parametrize("path", ["single", "batch"])
def test_force_fetches_without_validators_and_extracts_again(sqlite_harness: Harness, site, path: str) -> None:
    from scrape_contracts.defs.names import batch_job_name
    from scrape_contracts.defs.names import scrape_job_name
    from scrape_contracts_tests.fixture_site import Response

    harness = sqlite_harness
    body = product_page("Dune", "BK-1", "$100.00").encode()

    def etagged(request: Any) -> Response:
        if request.headers.get("if-none-match") == '"v1"':
            return Response(304, b"", {"ETag": '"v1"'})
        return Response(200, body, {"ETag": '"v1"'})

    site.set_handler("/p/1", etagged)
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    defs = harness.definitions()

    def scrape(force: bool) -> str:
        if path == "single":
            job = defs.resolve_job_def(scrape_job_name("shop"))
            result = job.execute_in_process(partition_key="p1", instance=harness.instance, raise_on_error=False,
                                            tags={"scrape_contracts/force": "true"} if force else None)
        else:
            result = run_batch(harness, "shop", defs=defs) if not force else \
                defs.resolve_job_def(batch_job_name("shop")).execute_in_process(
                    run_config={"ops": {"shop_scrape_batch": {"config": {"partitions": [], "force": True}}}},
                    instance=harness.instance, raise_on_error=False)
        assert result.success
        return result.run_id

    scrape(False)
    scrape(False)
    assert site.requests_to("/p/1")[-1].headers.get("if-none-match") == '"v1"'  # a conditional request: 304
    run_id = scrape(True)
    assert "if-none-match" not in site.requests_to("/p/1")[-1].headers  # forced: the whole page again
    assert harness.store.latest_candidate("shop", "p1").run_id == run_id
    if path == "single":
        trail = read_trail(harness.instance, "shop", partition="p1", limit=1000)[0]
        extracted = [e for e in trail if e.run_id == run_id and e.stage == "extracted"]
        assert extracted and "skipped" not in extracted[0].metadata  # extracted again, not reused


def test_pause_by_hand_then_batches_skip_the_target_until_resumed(sqlite_harness: Harness, site, capsys) -> None:
    from scrape_contracts.cli import main

    harness = sqlite_harness
    for i in (1, 2):
        site.set_page(f"/p/{i}", product_page(f"B{i}", f"BK-{i}", f"${i}0.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2")})
    args = ["--contracts-dir", str(harness.contracts_dir)]
    assert main([*args, "pause", "shop", "p1", "--reason", "site migrating", "--by", "carol"]) == 0
    assert "paused shop/p1: paused by hand by carol: site migrating" in capsys.readouterr().out
    result = run_batch(harness, "shop")
    assert {c.partition for c in harness.store.candidates_of_run(result.run_id)} == {"p2"}
    trail = read_trail(harness.instance, "shop", partition="p1")[0]
    assert [(e.stage, e.metadata["by"]) for e in trail] == [("paused", "carol")]
    # the UI's way: target_state_job
    defs = harness.definitions()
    done = defs.resolve_job_def("target_state_job").execute_in_process(run_config={"ops": {"set_target_state": {
        "config": {"contract": "shop", "partition": "p1", "action": "resume", "by": "dave", "reason": "done"}}}},
        instance=harness.instance)
    assert done.success and not harness.store.state("shop", "p1").paused
    assert main([*args, "pause", "shop", "p1", "--reason", " ", "--by", "carol"]) == 2
    assert "needs who (--by) and why (--reason)" in capsys.readouterr().err


def test_reextract_reads_stored_pages_without_fetching(sqlite_harness: Harness, site) -> None:
    from scrape_contracts.adapters.pages.folder import FolderPages

    harness = sqlite_harness
    keys = [f"t{i:02d}" for i in range(20)]
    for i, key in enumerate(keys):
        site.set_page(f"/p/{key}", product_page(f"B{i}", f"BK-{i}", f"${i + 1}.00"))
    harness.write_product_contract("shop", {k: site.url(f"/p/{k}") for k in keys})
    _without_sku(harness)
    assert run_batch(harness, "shop").success
    assert harness.accepted("shop", "t03") == {"title": "B3", "price": 4.0}
    fetched = len(site.requests)
    # the contract gains a field; one stored page is gone (pruned)
    harness.write_product_contract("shop", {k: site.url(f"/p/{k}") for k in keys})
    lost = harness.store.latest_accepted("shop", "t19").page_sha256
    FolderPages(harness.backend.home / "artifacts")._path(lost).unlink()
    job = harness.definitions().resolve_job_def("scrape_shop_batch_job")
    result = job.execute_in_process(run_config={"ops": {"shop_scrape_batch": {"config": {"reextract": True}}}},
                                    instance=harness.instance, raise_on_error=False)
    assert result.success
    assert len(site.requests) == fetched  # nothing reached the site
    assert harness.accepted("shop", "t03") == {"title": "B3", "sku": "BK-3", "price": 4.0}
    assert all("sku" in harness.accepted("shop", k) for k in keys[:19])
    assert harness.accepted("shop", "t19") == {"title": "B19", "price": 20.0}  # skipped, kept as it was
    trail = read_trail(harness.instance, "shop", partition="t19", limit=100)[0]
    assert any(e.run_id == result.run_id and "no stored page" in e.summary for e in trail)


@pytest.mark.parametrize("path", ["single", "batch"])
@pytest.mark.parametrize("unchanged", ["same_bytes", "not_modified"])
def test_fixed_selector_takes_effect_on_an_unchanged_page(sqlite_harness: Harness, site, monkeypatch,
                                                           path: str, unchanged: str) -> None:
    from scrape_contracts_tests.fixture_site import Response

    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")  # the batch's worker code, in a thread
    body = product_page("Dune", "BK-1", "$100.00").encode()
    answered_304: list[bool] = []

    def page(request: Any) -> Response:
        if unchanged == "not_modified" and request.headers.get("if-none-match") == '"v1"':
            answered_304.append(True)
            return Response(304, b"", {"ETag": '"v1"'})
        return Response(200, body, {"ETag": '"v1"'} if unchanged == "not_modified" else {})

    site.set_handler("/p/1", page)
    contract = harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    # a slip: the whole paragraph ("SKU: BK-1") instead of the code inside it
    contract.write_text(contract.read_text().replace('selector: "#sku"', 'selector: "p"'))

    def scrape() -> str:
        result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop")
        assert result.success
        return harness.store.latest_candidate("shop", "p1", run_id=result.run_id).outcome

    assert scrape() == "valid"
    assert harness.accepted("shop", "p1")["sku"] == "SKU: BK-1"
    assert scrape() == "unchanged"  # the shortcut: the page is the one accepted
    replies = len(answered_304)
    contract.write_text(contract.read_text().replace('selector: "p"', 'selector: "#sku"'))
    # the page is still the same (a 304, or the same bytes): the stored page is extracted with the fix
    assert scrape() == "valid"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 100.0}
    if unchanged == "not_modified":
        assert replies >= 1 and len(answered_304) == replies + 1  # the run fetched no new page
    assert scrape() == "unchanged"  # and the shortcut holds again under the fixed contract
    assert len(harness.store.accepted_history("shop", "p1")) == 2


@pytest.mark.parametrize("path", ["single", "batch"])
def test_a_heal_outlives_an_edit_only_where_the_contract_selector_did_not_change(
        sqlite_harness: Harness, site, monkeypatch, capsys, path: str) -> None:
    from scrape_contracts.cli import main

    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    contract = harness.write_product_contract("shop", {"p1": site.url("/p/1")})

    def scrape() -> tuple[str, str]:
        result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop")
        assert result.success
        return harness.store.latest_candidate("shop", "p1", run_id=result.run_id).outcome, result.run_id

    assert scrape()[0] == "valid"
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))  # every id renamed
    assert scrape()[0] == "healed"
    healed = harness.store.selector_history("shop")[-1]
    assert healed.version == 2 and set(healed.changes) == {"title", "sku", "price"}
    # an edit that leaves every selector alone keeps every heal
    contract.write_text(contract.read_text().replace("max_change_pct: 50", "max_change_pct: 60"))
    assert scrape()[0] == "unchanged"
    assert [v.version for v in harness.store.selector_history("shop")] == [1, 2]
    # the user rewrites sku's selector for the new layout: that heal goes, the others stay
    contract.write_text(contract.read_text().replace('selector: "#sku"', 'selector: "p > span"'))
    outcome, run_id = scrape()
    assert outcome == "unchanged"  # the same values, read without any heal
    current = harness.store.selector_history("shop")[-1]
    assert (current.version, current.source) == (3, "contract")
    assert current.selectors == {"title": healed.selectors["title"], "sku": "p > span",
                                 "price": healed.selectors["price"]}
    assert current.changes["sku"]["dropped"] == healed.selectors["sku"]
    assert harness.store.latest_candidate("shop", "p1", run_id=run_id).selector_version == 3
    assert harness.store.state("shop", "p1").heal_attempts == 0
    trail = read_trail(harness.instance, "shop", partition="p1", limit=1000)[0]
    assert not [e for e in trail if e.run_id == run_id and e.stage in ("healing", "healing_refused")]
    assert main(["--contracts-dir", str(harness.contracts_dir), "selectors", "shop"]) == 0
    shown = capsys.readouterr().out.split("v3 ")[1]
    assert "sku: 'p > span' (the contract's; healed" in shown and "dropped" in shown
    assert shown.count("kept: the contract's selector for it did not change") == 2
