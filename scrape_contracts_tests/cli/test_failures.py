"""Dead letters: ``scrape-contracts failures`` lists the targets whose last runs failed, grouped by reason,
and ``--replay`` scrapes them again as one batch; the list drains as they recover. Real runs on a real
instance against a real site on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
import yaml

from scrape_contracts.defs.names import candidate_key
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.defs.provider_setup import ProviderSetup, provider_setup  # noqa: F401
from scrape_contracts_tests.fixture_site import Response

pytestmark = pytest.mark.timeout(600)

KEYS = [f"t{i:02d}" for i in range(30)]
DOWN = ["t03", "t11", "t27"]  # the site answers 503 for these
CHEAP = ["t05", "t14", "t20"]  # their price breaks the contract's rule (min: 1)


def _contract(setup: ProviderSetup) -> None:
    contract = {
        "name": "shop", "owners": ["team:data"],
        "targets": [{"url": setup.site.url(f"/p/{k}"), "key": k} for k in KEYS],
        "fetch": {"adapter": "http", "timeout_s": 5, "retries": 0, "allow_private_addresses": True},
        "fields": {"title": {"selector": "#title"}, "sku": {"selector": "#sku"},
                   "price": {"selector": "#price", "type": "price", "rules": {"min": 1}}},
        "healing": {"enabled": False},
    }
    (setup.contracts_dir / "shop.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))


def _serve(setup: ProviderSetup, *, broken: bool) -> None:
    for i, key in enumerate(KEYS):
        if broken and key in DOWN:
            setup.site.set_handler(f"/p/{key}", lambda _request: Response(503, b"maintenance"))
        elif broken and key in CHEAP:
            setup.site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", "$0.50"))
        else:
            setup.site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))


def _failures(main: Any, setup: ProviderSetup, capsys: pytest.CaptureFixture[str],
              *args: str) -> tuple[int, str]:
    code = main(["--contracts-dir", str(setup.contracts_dir), "failures", "shop", *args])
    return code, capsys.readouterr().out


def test_thirty_targets_six_failing_for_two_reasons_are_listed_grouped_and_a_replay_drains_the_list(
        provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str]) -> None:
    from scrape_contracts.cli import main
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.service.failures import dead_letters

    setup = provider_setup
    _contract(setup)
    _serve(setup, broken=True)
    first = setup.run_batch("shop")
    assert first.success
    # after one failed run they are not dead letters of --last 2 yet
    assert _failures(main, setup, capsys, "--last", "2") == (0, "shop: no target failed its last 2 run(s)\n")
    assert setup.run_batch("shop").success

    code, out = _failures(main, setup, capsys, "--last", "2")
    assert code == 0
    assert out.splitlines()[0] == "shop: 6 target(s) failed their last 2 run(s), for 2 reason(s):"
    [loaded] = load_contracts(setup.contracts_dir).contracts
    found = dead_letters(setup.store, loaded, last=2)
    groups = {g.reason: sorted(t.partition for t in g.targets) for g in found}
    assert groups == {
        "GET <url> failed: HTTP 503 Service Unavailable after 1 attempt (the site is failing or overloaded; "
        "usually temporary — run again later or raise fetch.retries)": DOWN,
        "rejected by the checks: price_within_bounds": CHEAP}
    for reason, keys in groups.items():
        assert f"  {reason}: 3 target(s)" in out
        assert all(f"    {key}  2 failed in a row  {setup.site.url('/p/' + key)}" in out for key in keys)

    # the Dagster job shows the same list in the UI (an observation of the candidate asset)
    shown = setup.job("scrape_shop_failures_job").execute_in_process(
        run_config={"ops": {"shop_failures": {"config": {"last": 2}}}}, instance=setup.instance)
    [observation] = [e.asset_observation_data.asset_observation for e in shown.get_asset_observation_events()]
    assert observation.asset_key == candidate_key("shop")
    assert observation.metadata["targets"].value == 6 and observation.metadata["reasons"].value == 2
    assert "| rejected by the checks: price_within_bounds | 3 | t05, t14, t20 |" in \
        observation.metadata["dead_letters"].value

    _serve(setup, broken=False)  # the site is fixed
    requests_before = len(setup.site.requests)
    code, out = _failures(main, setup, capsys, "--last", "2", "--replay")
    assert code == 0, out
    assert "replayed 6 target(s) as one batch" in out and out.rstrip().endswith(
        "shop: no target fails its last 2 run(s) now")
    # one batch of the six, nothing else fetched (robots.txt is read once per host per run)
    replayed = {r.path for r in setup.site.requests[requests_before:]} - {"/robots.txt"}
    assert replayed == {f"/p/{k}" for k in DOWN + CHEAP}
    for key in DOWN + CHEAP:
        latest = setup.store.latest_accepted("shop", key)
        assert latest is not None and latest.record["price"] == 10 + KEYS.index(key)
    assert _failures(main, setup, capsys, "--last", "2") == (0, "shop: no target failed its last 2 run(s)\n")
    # reconcile is for provider contracts: said in one line, before any run is made
    runs_before = len(setup.instance.get_runs())
    assert main(["--contracts-dir", str(setup.contracts_dir), "reconcile", "shop", "t00", "--resubmit"]) == 1
    assert capsys.readouterr().err == ("error: 'shop' does not fetch through a provider (fetch.adapter is "
                                       "'http'): nothing to reconcile\n")
    assert len(setup.instance.get_runs()) == runs_before
    [replay] = setup.instance.get_runs(dg.RunsFilter(job_name="scrape_shop_failures_job", tags={
        "scrape_contracts/trigger": "cli-replay"}))
    assert replay.status == dg.DagsterRunStatus.SUCCESS
