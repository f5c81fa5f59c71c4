"""The offline demo: the example contracts on the example site, through a real Dagster instance.

Round 1 scrapes site v1. Round 2 scrapes v2, a redesign: books' ids and classes change (the healer finds
the fields again through data-field/itemprop anchors) and two prices jump, 9.50 → 29.00 and 15.00 → 34.00
(quarantined: they wait for your review, the demo ends by printing the commands); the job board drops salary
and location (the healer refuses, three runs exhaust the budget and the targets pause). The reviews of a
café are a list contract: 60 reviews over 3 pages in v1; v2 is a redesign of the list (the item selector
is relocated and the fields inside the items healed) in which one review is new and one edited: the healed
set is accepted with the records added and changed, by key, in its metadata.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.defs.launching import QUIET, run_in_process  # QUIET: the demo prints its own summary

from scrape_contracts.cli.common import REPO_ROOT
SITE = REPO_ROOT / "examples" / "site"


def _definitions(site_version: str) -> dg.Definitions:
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.resources import FetchResource

    return build_definitions(resources={"fetcher": FetchResource(fixture_root=str(SITE / site_version))})


def _partition_keys(defs: dg.Definitions, job_name: str, instance: dg.DagsterInstance) -> list[str]:
    job = defs.resolve_job_def(job_name)
    return list(job.partitions_def.get_partition_keys(dynamic_partitions_store=instance))


def run_demo(home: Path) -> int:
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.defs.names import scrape_job_name
    from scrape_contracts.defs.targets import add_targets, read_targets_file

    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    instance = dg.DagsterInstance.get()
    store = ProjectStore(settings.db_url())
    loaded = load_contracts()
    for error in loaded.errors:
        print(f"contract not loaded: {error}")
    for item in loaded.contracts:
        if item.contract.is_dynamic:
            add_targets(item, read_targets_file(item), instance, store)

    outcomes: dict[tuple[str, str], list[str]] = {}

    def scrape(round_name: str, site_version: str, repeat: dict[str, int] | None = None) -> None:
        defs = _definitions(site_version)
        for item in loaded.contracts:
            name = item.contract.name
            job = defs.resolve_job_def(scrape_job_name(name))
            for key in _partition_keys(defs, scrape_job_name(name), instance):
                for _ in range((repeat or {}).get(name, 1)):
                    result = run_in_process(job, partition_key=key, instance=instance, raise_on_error=False,
                                            run_config=QUIET)
                    candidate = store.latest_candidate(name, key, run_id=result.run_id)
                    outcome = candidate.outcome if candidate else "failed"
                    outcomes.setdefault((name, key), []).append(outcome)
                    print(f"  {name:<7} {key:<44} {outcome:<16} run {result.run_id[:8]}")
                    if candidate is None:
                        print(f"         error: {_first_error(result)}")

    print(f"DAGSTER_HOME={home}")
    print("Round 1: site v1")
    scrape("round 1", "v1")
    print("Round 2: site v2 (redesign; one price jump; job facts removed). Jobs scraped 3x to spend the "
          "healing budget.")
    scrape("round 2", "v2", repeat={"jobs": 3})
    rows = []
    for (name, key), seen in outcomes.items():
        accepted = store.latest_accepted(name, key)
        state = store.state(name, key)
        rows.append((name, key, " → ".join(seen), f"v{accepted.version} {_short(accepted.record)}" if accepted
                     else "-", f"paused: {state.pause_reason}" if state.paused else "active"))
    _print_table(rows)
    env = "" if home == (Path.cwd() / ".dagster_home").resolve() else f"DAGSTER_HOME={home} "
    waiting = store.quarantined()
    if waiting:
        print("\nWaiting for your review (accept makes the new value the accepted one, reject keeps the old):")
        for candidate in waiting:
            reasons = "; ".join(v["message"] for v in (candidate.details or {}).get("violations", []))
            print(f"  {candidate.contract}/{candidate.partition}: {reasons}")
            print(f"    {env}scrape-contracts review accept {candidate.contract} {candidate.partition} "
                  "--reviewer YOU --reason WHY")
    print(f"\nOpen this instance in the Dagster UI (webserver and daemon):\n  {env}scrape-contracts dev\n"
          "then Assets → scrape/books (partitions, checks, metadata) and Runs.")
    print(f"Event trail of one partition:\n  {env}scrape-contracts events books --partition neuromancer")
    return 0


def _first_error(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error.cause is not None:  # the user's exception, not dagster's wrapper
                error = error.cause
            return error.message.strip().splitlines()[-1][:300]
    return "run failed"


def _short(record: dict) -> str:
    from scrape_contracts.engine.lists import is_set, set_records

    if is_set(record):
        return f"{len(set_records(record))} records"
    text = ", ".join(f"{k}={v}" for k, v in record.items())
    return text if len(text) <= 60 else text[:57] + "..."


def _print_table(rows: list[tuple]) -> None:
    headers = ("contract", "target", "outcomes, run by run", "accepted now", "state")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(4)]
    print("\nOutcomes")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)) + "  " + headers[4])
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + str(row[4])[:70])
