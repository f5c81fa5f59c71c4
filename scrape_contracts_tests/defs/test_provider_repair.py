"""The provider's own repair through Dagster: healing refuses, the provider proposes, a person decides, the
contract's checks have the last word. Real runs on a real instance, the real project store, and the stand-in
provider (scrape_contracts/testing/provider.py, a stand-in for a hosted scraping API that cannot run here) on
127.0.0.1, whose log says how many repairs were asked."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
import yaml

from scrape_contracts import cli
from scrape_contracts.adapters.statuses import RepairState, SelectorSource
from scrape_contracts_tests.conftest import failure_text, product_page
from scrape_contracts_tests.defs.provider_setup import (  # noqa: F401
    batch_summary, ProviderSetup, provider_contract, provider_setup,
)

pytestmark = pytest.mark.timeout(300)

BUY_BOX = '<div class="buy"><span class="label">Price:</span> <span id="price" data-field="price">$10.00</span></div>'
# a redesign the healer refuses (two unlabelled prices, no anchor): only a person can tell which is which
REDESIGN = '<table><tr><td>$12.00</td><td>$12.50</td></tr></table>'
RIGHT, WRONG = "table td:first-child", "header span"  # the price; the cart's "$0.00"


def _write(setup: ProviderSetup, urls: dict[str, str], **budget: Any) -> None:
    contract = provider_contract("shop", urls, budget=budget or None)
    contract["fetch"]["provider"]["repair"] = True
    contract["fields"]["price"]["rules"] = {"min": 1, "max_change_pct": 50}
    (setup.contracts_dir / "shop.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))


def _redesign(setup: ProviderSetup, path: str = "/p/1") -> None:
    setup.site.set_page(path, product_page("Dune", "BK-1", "$10.00").replace(BUY_BOX, REDESIGN))


def _review(setup: ProviderSetup, decision: str, reason: str, partition: str = "p1") -> dg.ExecuteInProcessResult:
    config = {"contract": "shop", "partition": partition, "decision": decision, "reviewer": "alice",
              "reason": reason}
    return setup.job("review_job").execute_in_process(
        run_config={"ops": {"review_decision": {"config": config}}}, instance=setup.instance,
        raise_on_error=False)


def _api_target(setup: ProviderSetup) -> Any:
    from scrape_contracts.api.ops import FrontDoor
    from scrape_contracts.api.tokens import TokenStore

    door = FrontDoor(contracts_dir=setup.contracts_dir, db_url=setup.db_url, instance=setup.instance)
    principal = door.authenticate(TokenStore(setup.store.engine).create("team:data", "read")[1])
    [target] = door.get_contract(principal, "shop").targets
    return target


def _accepted_v1(setup: ProviderSetup) -> None:
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    _write(setup, {"p1": setup.site.url("/p/1")})
    first = setup.run_single("shop", "p1")
    assert first.success, failure_text(first)


@pytest.mark.parametrize("provider_setup", ["sqlite", "postgres"], indirect=True)
def test_a_refused_field_is_repaired_only_after_a_person_accepts_and_the_checks_pass(
        provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup, provider = provider_setup, provider_setup.provider
    _accepted_v1(setup)
    _redesign(setup)
    provider.repair_selectors = {"price": RIGHT}

    quarantined = setup.run_single("shop", "p1")
    assert not quarantined.success
    [asked] = provider.repair_requests()  # asked once, for the field the healer refused, on the job's page
    assert asked["fields"] == ["price"] and asked["job_id"] == provider.submits()[-1]["job_id"]
    [proposal] = setup.store.repairs("shop", "p1")
    assert (proposal.state, proposal.selectors, proposal.values, proposal.cost) == (
        RepairState.PROPOSED, {"price": RIGHT}, {"price": "$12.00"}, 0.05)
    state = setup.store.state("shop", "p1")
    assert state.paused and state.pause_reason.startswith("review required: provider repair proposed: price")
    assert "provider repair proposed" in setup.events_text(quarantined.run_id)  # the UI's observations
    # nothing accepted, no selector changed, until a person decides
    assert setup.store.latest_accepted("shop", "p1").record["price"] == 10.0
    assert [v.source for v in setup.store.selector_history("shop")] == [SelectorSource.CONTRACT]
    # the repair's cost is spent with the job's
    assert setup.store.provider_spend("shop", run_id=quarantined.run_id).total == pytest.approx(0.06)
    # what a reviewer sees: the CLI's list and show, the API's target status
    assert cli.main(["review", "list", "shop"]) == 0
    listed = capsys.readouterr().out
    assert f"p1  candidate {setup.store.pending_review('shop', 'p1').id}  provider repair proposed: price: " \
           f"'#price' → '{RIGHT}' reads '$12.00'" in listed
    assert cli.main(["review", "show", "shop", "p1"]) == 0
    shown = capsys.readouterr().out
    assert f"price: '#price' -> '{RIGHT}', reads '$12.00'" in shown and "accepted now: v1" in shown
    target = _api_target(setup)
    assert target.repair_proposal.selectors == {"price": RIGHT} and target.repair_proposal.cost == 0.05
    assert target.pause_reason.startswith("review required: provider repair proposed")

    accepted = _review(setup, "accept", "the first cell is the price")
    assert accepted.success, failure_text(accepted)
    latest = setup.store.latest_accepted("shop", "p1")
    assert (latest.version, latest.record["price"], latest.source, latest.reviewer) == (2, 12.0, "review", "alice")
    version = setup.store.selector_history("shop")[-1]
    assert version.source == SelectorSource.PROVIDER_REPAIR and version.selectors["price"] == RIGHT
    assert version.changes["price"]["evidence"]["approved_by"] == "alice"
    assert setup.store.repairs("shop", "p1")[0].state == RepairState.ACCEPTED
    assert not setup.store.state("shop", "p1").paused

    again = setup.run_single("shop", "p1")  # the repaired selector in force: no heal, no second repair
    assert again.success, failure_text(again)
    assert len(provider.repair_requests()) == 1


def test_a_wrong_proposal_a_person_accepts_is_refused_by_the_checks_on_the_batch_path(
        provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup, provider = provider_setup, provider_setup.provider
    _accepted_v1(setup)
    _redesign(setup)
    provider.repair_selectors = {"price": WRONG}

    batch = setup.run_batch("shop", ["p1"])
    assert batch.success
    summary = batch_summary(batch)
    assert (summary["provider_jobs"], summary["provider_repairs"]) == (1, 1)
    assert summary["provider_spend"] == pytest.approx(0.06)
    [proposal] = setup.store.repairs("shop", "p1")
    assert proposal.state == RepairState.PROPOSED and proposal.values == {"price": "Cart: $0.00"}
    assert setup.store.pending_review("shop", "p1") is not None

    # accepted by a person through the CLI: refused, the failing check named
    assert cli.main(["review", "accept", "shop", "p1", "--reviewer", "alice", "--reason", "looks fine"]) == 1
    message = capsys.readouterr().err
    assert "refused" in message and "fails the contract's checks (" in message and "price_within_bounds" in message, message
    assert setup.store.latest_accepted("shop", "p1").record == {"title": "Dune", "sku": "BK-1", "price": 10.0}
    assert [v.source for v in setup.store.selector_history("shop")] == [SelectorSource.CONTRACT]
    [proposal] = setup.store.repairs("shop", "p1")
    assert proposal.state == RepairState.REFUSED and proposal.decided_by == "alice"
    state = setup.store.state("shop", "p1")
    assert state.paused and "refused" in state.pause_reason
    assert _api_target(setup).repair_proposal is None  # nothing waits any more


def test_a_rejected_proposal_changes_nothing_and_the_target_stays_paused(provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    _accepted_v1(setup)
    _redesign(setup)
    provider.repair_selectors = {"price": RIGHT}
    assert not setup.run_single("shop", "p1").success

    rejected = _review(setup, "reject", "not the price we publish")
    assert rejected.success, failure_text(rejected)
    [proposal] = setup.store.repairs("shop", "p1")
    assert (proposal.state, proposal.decided_by, proposal.decided_reason) == (
        RepairState.REJECTED, "alice", "not the price we publish")
    assert setup.store.latest_accepted("shop", "p1").version == 1
    assert [v.source for v in setup.store.selector_history("shop")] == [SelectorSource.CONTRACT]
    state = setup.store.state("shop", "p1")
    assert state.paused and "rejected by alice" in state.pause_reason
    assert len(provider.repair_requests()) == 1


def test_a_failed_repair_leaves_an_ordinary_rejection_and_its_cost_counts(provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    _accepted_v1(setup)
    _redesign(setup)
    provider.repair_fail = "could not find the field"

    result = setup.run_single("shop", "p1")
    assert not result.success and "rejected" in failure_text(result)
    [proposal] = setup.store.repairs("shop", "p1")
    assert proposal.state == RepairState.FAILED and "could not find the field" in proposal.error
    assert setup.store.pending_review("shop", "p1") is None
    assert setup.store.provider_spend("shop").total == pytest.approx(0.01 + 0.01 + 0.05)


def test_repairs_are_charged_to_the_budget_and_not_asked_once_it_is_spent(provider_setup: ProviderSetup) -> None:
    setup, provider = provider_setup, provider_setup.provider
    setup.site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    _write(setup, {"p1": setup.site.url("/p/1")}, amount=0.1, per="day", currency="EUR")
    assert setup.run_single("shop", "p1").success
    _redesign(setup)
    provider.repair_selectors = {"price": RIGHT}
    assert not setup.run_single("shop", "p1").success  # job 0.01 and repair 0.05: 0.07 of 0.1 spent
    assert _review(setup, "reject", "not now").success
    setup.store.resume("shop", "p1")

    again = setup.run_single("shop", "p1")  # its job fits (0.08), a second repair would not (0.13)
    assert not again.success
    assert len(provider.repair_requests()) == 1
    assert [r.state for r in setup.store.repairs("shop", "p1")] == [RepairState.REJECTED]
    story = setup.events_text(again.run_id)
    assert "repair_failed" in story and "cost budget spent" in story and "no repair was asked" in story
    assert setup.store.provider_spend("shop").total == pytest.approx(0.08)
