"""Workers for test_concurrency: store-race scenarios (threads or processes) and a whole scrape run.

Kept apart from the test module so that a spawned process imports only what it needs, and so that a run
worker is a real separate OS process (``python -m scrape_contracts_tests.defs._worker run ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

# (kind, payload): kind is "ok" or the name of the exception the store raised
Outcome = tuple[str, Any]

BARRIER_TIMEOUT_S = 30.0


class Barrier(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...

    def abort(self) -> None: ...


def heal_contract(name: str, fields: int) -> Any:
    """A real LoadedContract whose fields f0..f<n-1> start with the selectors #old0..#old<n-1>."""
    from scrape_contracts.contract.loader import LoadedContract
    from scrape_contracts.contract.model import Contract

    contract = Contract.model_validate({
        "name": name,
        "targets": [{"url": "http://127.0.0.1/p", "key": "p"}],
        "fields": {f"f{k}": {"selector": f"#old{k}"} for k in range(fields)},
    })
    return LoadedContract(contract, Path(f"{name}.yaml"))


def _attempt(call: Any) -> Outcome:
    from scrape_contracts.adapters.store import StoreError

    try:
        return "ok", call()
    except StoreError as exc:
        return type(exc).__name__, str(exc)


def run_scenario(scenario: str, url: str, spec: dict[str, Any], worker: int, barrier: Barrier) -> list[Outcome]:
    """Play ``worker``'s part of every iteration of ``scenario``; all workers start each iteration together."""
    try:
        return _play(scenario, url, spec, worker, barrier)
    except BaseException:
        barrier.abort()  # the other workers fail now instead of waiting out the barrier timeout
        raise


def _play(scenario: str, url: str, spec: dict[str, Any], worker: int, barrier: Barrier) -> list[Outcome]:
    from scrape_contracts.adapters.store import ProjectStore

    store = ProjectStore(url) if scenario != "open_fresh" else None
    outcomes: list[Outcome] = []
    for i, item in enumerate(spec["iterations"]):
        barrier.wait(BARRIER_TIMEOUT_S)
        run_id = f"w{worker}-i{i}"
        if scenario == "accept_same":
            outcome = _attempt(lambda: store.accept(item, run_id=run_id).version)
        elif scenario == "accept_distinct":
            outcome = _attempt(lambda: store.accept(item[worker], run_id=run_id).version)
        elif scenario == "selector_cas":
            outcome = _attempt(lambda: store.add_selector_version(
                item["contract"], parent_version=item["parent"],
                selectors={**item["base"], "f0": f"#won-by-w{worker}"}, contract_selectors=item["base"],
                source="heal", changes={"f0": {"new": f"#won-by-w{worker}"}}, run_id=run_id).version)
        elif scenario == "heal_retry":
            outcome = _heal_one_field(store, item, spec["fields"], worker, run_id) if worker < spec["fields"] \
                else ("idle", None)
        elif scenario == "decide":
            decision = "accept" if worker % 2 == 0 else "reject"
            outcome = _attempt(lambda: (decision, store.decide(
                item["contract"], item["partition"], decision, reviewer=f"w{worker}", reason="race",
                run_id=run_id, candidate_id=item["candidate_id"]).accepted_version))
        elif scenario == "quarantine_vs_accept":
            # two overlapping runs of one partition: the older one's candidate needs review, the newer one's
            # is accepted; either may commit first
            if worker == 0:
                outcome = _attempt(lambda: store.quarantine(item["older"], "price jumped").status)
            elif worker == 1:
                outcome = _attempt(lambda: store.accept(item["newer"], run_id=run_id).version)
            else:
                outcome = ("idle", None)
        elif scenario == "record_chunks":
            outcome = _attempt(lambda: _record_chunk(store, item, worker, run_id))
        elif scenario == "open_fresh":
            outcome = _attempt(lambda: ProjectStore(item).url)
        else:
            raise ValueError(f"unknown scenario {scenario!r}")
        outcomes.append(outcome)
    return outcomes


def chunk_plan(worker: int, k: int) -> str:
    """What ``worker`` does to target k in a ``record_chunks`` race: reject, fail (a fetch), or unchanged."""
    return ("reject", "fail", "unchanged")[(k + worker) % 3]


def _record_chunk(store: Any, item: dict[str, Any], worker: int, run_id: str) -> list[str]:
    """A batch's commit of one chunk (candidates, then the fetch failures) over targets other workers share."""
    from scrape_contracts.adapters.store import CandidateAction, NewCandidate

    contract, count = item["contract"], item["targets"]
    order = list(range(count) if worker % 2 else reversed(range(count)))  # the store must not rely on it
    chunk = []
    for k in order:
        plan = chunk_plan(worker, k)
        if plan == "fail":
            continue
        chunk.append(NewCandidate(
            contract=contract, partition=f"t{k}", run_id=run_id, url=f"http://127.0.0.1/t{k}", record={"k": k},
            outcome="rejected" if plan == "reject" else "unchanged", details={}, page_sha256=None,
            selector_version=1, action=CandidateAction.REJECT if plan == "reject" else CandidateAction.UNCHANGED,
            reason=f"rejected by w{worker}", validators={"etag": f"w{worker}-t{k}"} if plan == "unchanged" else None))
    recorded = store.record_candidates(chunk)
    store.record_failures(contract, [(f"t{k}", f"down for w{worker}") for k in order if chunk_plan(worker, k) == "fail"])
    return [row.status for row in recorded]


def _heal_one_field(store: Any, contract_name: str, fields: int, worker: int, run_id: str) -> Outcome:
    """What a run does after healing field f<worker>: the pipeline's own save-with-retry."""
    from scrape_contracts.engine.heal import HealResult
    from scrape_contracts.service.records import Extracted, Fetched
    from scrape_contracts.service.heal_steps import save_selectors as _save_selectors

    loaded = heal_contract(contract_name, fields)
    base = loaded.contract.selectors()
    name = f"f{worker}"
    healed = f"#new{worker}"
    # every worker extracted with version 1 before any heal was saved
    fetched = Fetched(contract_name, "p", "https://example.com/p", "https://example.com/p", None, False, (),
                      None, None, None)
    extracted = Extracted(fetched, {}, (), 1, dict(base))
    results = {name: HealResult(value="v", selector=healed, confidence=0.9, evidence={"worker": worker})}
    version = _attempt(lambda: _save_selectors(loaded, extracted, results, run_id, store))
    if version[0] != "ok":
        return version
    return "ok", {"version": version[1].version, "parent": version[1].parent_version,
                  "selector": version[1].selectors[name]}


def crew_main(worker: int, inbox: Any, outbox: Any, barrier: Barrier) -> None:
    """A long-lived worker process: runs scenarios from ``inbox`` until it reads None."""
    # importing the service (and the healer) costs time: pay it once, while the parent sets up
    import scrape_contracts.service.scrape  # noqa: F401

    from scrape_contracts.adapters import store as store_module

    outbox.put((worker, "ready", None))
    while True:
        command = inbox.get()
        if command is None:
            return
        scenario, url, spec = command
        try:
            outbox.put((worker, "done", run_scenario(scenario, url, spec, worker, barrier)))
        except BaseException:  # noqa: BLE001 (the parent must see every failure, not a timeout)
            outbox.put((worker, "error", traceback.format_exc()))
        finally:
            # the test drops its database afterwards; pooled connections to it must not linger
            for engine_url in list(store_module._engines):
                store_module._engines.pop(engine_url).dispose()


# ---- a whole scrape run in its own process ------------------------------------------------------------
def run_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="_worker run")
    parser.add_argument("--contracts-dir", required=True)
    parser.add_argument("--contract", required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--ready", required=True, help="file to create once the job is built")
    parser.add_argument("--go", required=True, help="file to wait for before starting the run")
    parser.add_argument("--result", required=True, help="file to write the outcome to (JSON)")
    args = parser.parse_args(argv)

    import warnings

    import dagster as dg

    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.names import scrape_job_name

    job = build_definitions(args.contracts_dir).resolve_job_def(scrape_job_name(args.contract))
    instance = dg.DagsterInstance.get()  # DAGSTER_HOME's dagster.yaml: PostgreSQL storage
    Path(args.ready).touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while not os.path.exists(args.go):
        if time.monotonic() > deadline:
            print("barrier: the go file never appeared", file=sys.stderr)
            return 3
        time.sleep(0.01)
    result = job.execute_in_process(partition_key=args.partition, instance=instance, raise_on_error=False,
                                    run_id=args.run_id)
    failures = [e.step_failure_data.error.message for e in result.all_events
                if e.is_step_failure and e.step_failure_data.error is not None]
    Path(args.result).write_text(json.dumps({"run_id": result.run_id, "success": result.success,
                                             "failures": failures}))
    instance.dispose()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["run"]:
        sys.exit("usage: python -m scrape_contracts_tests.defs._worker run --help")
    sys.exit(run_main(sys.argv[2:]))
