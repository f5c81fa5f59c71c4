"""``scrape-contracts targets add|list``, ``run`` and ``reextract``: what is scraped, launched as runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from scrape_contracts.cli import REPO_ROOT, CliError, _contract, _instance, _store, _workspace_file
from scrape_contracts.contract.targets import without_userinfo


def register(sub: Any) -> None:
    targets = sub.add_parser("targets", help="targets (partitions) of a contract").add_subparsers(
        dest="targets_command", required=True)
    p = targets.add_parser("add", help="add target URLs to a dynamic contract")
    p.add_argument("contract")
    p.add_argument("urls", nargs="+")
    p.set_defaults(func=cmd_targets_add)
    p = targets.add_parser("list", help="list a contract's targets and partition keys")
    p.add_argument("contract")
    p.set_defaults(func=cmd_targets_list)
    p = sub.add_parser("run", help="launch scrape runs through the instance's run coordinator, idempotently")
    p.add_argument("contract")
    p.add_argument("--partition", default=None,
                   help="one target, as one run (default: every target that is not paused, as batched runs of "
                        "the contract's batch_size)")
    p.add_argument("--idempotency-key", required=True,
                   help="the same key again launches nothing and prints the existing run")
    p.add_argument("--workspace", type=_workspace_file, default=str(REPO_ROOT / "workspace.yaml"))
    p.add_argument("--force", action="store_true",
                   help="fetch every page again without validators and extract it even when it did not change")
    p.add_argument("--wait", action="store_true",
                   help="wait for the runs to finish and print a summary (targets per outcome, failures, rate)")
    p.add_argument("--timeout", type=_timeout, default=60.0, metavar="SECONDS",
                   help="with --wait: give up (exit 1) when the runs are still queued after this long and no "
                        "dagster-daemon is running to start them (default 60)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("reextract", help="extract, validate, heal and gate each target's last fetched page again, "
                                         "without fetching (after a contract edit), as batched runs")
    p.add_argument("contract")
    p.add_argument("--partition", default=None, help="one target (default: every target that is not paused)")
    p.add_argument("--idempotency-key", required=True,
                   help="the same key again launches nothing and prints the existing run")
    p.add_argument("--workspace", type=_workspace_file, default=str(REPO_ROOT / "workspace.yaml"))
    p.add_argument("--wait", action="store_true", help="wait for the runs and print a summary")
    p.add_argument("--timeout", type=_timeout, default=60.0, metavar="SECONDS",
                   help="with --wait: give up (exit 1) when the runs are still queued after this long and no "
                        "dagster-daemon is running to start them (default 60)")
    p.set_defaults(func=cmd_run, reextract=True, force=False)


def cmd_targets_add(args: argparse.Namespace) -> int:
    from scrape_contracts.defs.targets import add_targets

    loaded = _contract(args, args.contract)
    instance = _instance()
    try:
        added = add_targets(loaded, args.urls, instance, _store())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key, url in added.items():
        print(f"added  {key}  {url}")
    print(f"{len(added)} new target(s) for {args.contract!r}")
    return 0


def cmd_targets_list(args: argparse.Namespace) -> int:
    from scrape_contracts.reader import AcceptedDataError

    loaded = _contract(args, args.contract)
    contract = loaded.contract
    try:
        store = _store(existing=True)
    except AcceptedDataError:
        if contract.is_dynamic:  # its targets live in the store
            raise
        store = None  # nothing scraped yet: the YAML's targets, none paused
    if contract.is_dynamic:
        targets = store.list_targets(contract.name)
    else:
        targets = {t.partition_key: t.url for t in contract.static_targets}
    paused = store.paused_partitions(contract.name) if store is not None else {}
    for key, url in targets.items():
        note = f"  [paused: {paused[key]}]" if key in paused else ""
        # stores written before target URLs with credentials were refused may still hold some
        print(f"{key}  {without_userinfo(url)}{note}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import warnings

    import click
    import dagster as dg

    from scrape_contracts import launch
    from scrape_contracts.defs.partitions import partitions_for

    loaded = _contract(args, args.contract)
    contract = loaded.contract
    instance = _instance()
    if args.contracts_dir:
        # the code server that the launch starts reads the contracts from here
        os.environ["SCRAPE_CONTRACTS_DIR"] = str(Path(args.contracts_dir).resolve())
    keys: list[str] = []
    if args.partition:
        known = partitions_for(contract).get_partition_keys(dynamic_partitions_store=instance)
        if args.partition not in known:
            raise CliError(f"{contract.name!r} has no target {args.partition!r}; "
                           f"see `scrape-contracts targets list {contract.name}`", 2)
    else:
        paused = _store().paused_partitions(contract.name)
        all_keys = partitions_for(contract).get_partition_keys(dynamic_partitions_store=instance)
        keys = [k for k in all_keys if k not in paused]
        for key in sorted(set(all_keys) & set(paused)):
            print(f"{contract.name}/{key}: skipped, paused ({paused[key]})")
        if not keys:
            print(f"nothing to scrape: {contract.name!r} has no target that is not paused")
            return 0

    def report(spec, run, launched_now: bool) -> None:
        if launched_now:
            print(f"{spec.label}: launched run {run.run_id} ({run.status.value})")
        else:
            print(f"{spec.label}: already launched with this key: run {run.run_id} ({run.status.value})")

    specs = launch.run_specs(loaded, keys, idempotency_key=args.idempotency_key, partition=args.partition,
                             force=args.force, reextract=getattr(args, "reextract", False),
                             all_targets=not args.partition)
    try:
        with warnings.catch_warnings():
            # Dagster warns with the whole stack trace of a location that fails to load, then raises
            warnings.filterwarnings("ignore", message="Error loading repository location",
                                    category=UserWarning)
            runs = launch.launch(instance, args.workspace, specs, report)
    except (dg.DagsterError, click.UsageError) as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise CliError(f"cannot load the code location of {args.workspace}: {first}") from None
    if any(r.status == dg.DagsterRunStatus.QUEUED for r in runs) and not launch.daemon_running(instance):
        print(_DAEMON_HINT + (f"; waiting up to {args.timeout:g}s for one" if args.wait else ""), flush=True)
    if not args.wait:
        return 0
    try:
        finished = launch.wait(instance, [r.run_id for r in runs], give_up_after=args.timeout)
    except launch.NoDaemon as exc:
        raise CliError(f"{exc}: start one with the same DAGSTER_HOME "
                       "(`dagster-daemon run -w workspace.yaml`, "
                       "or `scrape-contracts dev`), then run this command again to wait for the same runs "
                       "(the idempotency key launches nothing twice)") from None
    return _print_summary(contract.name, finished)


_DAEMON_HINT = ("note: runs are queued and no dagster-daemon is running to start them: run `dagster-daemon run` "
                "(or `scrape-contracts dev`) with the same DAGSTER_HOME")


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def _print_summary(contract: str, runs: list) -> int:
    from collections import Counter

    import dagster as dg

    store = _store()
    outcomes: Counter[str] = Counter()
    failures = []
    for run in runs:
        for candidate in store.candidates_of_run(run.run_id):
            outcomes[candidate.status if candidate.status != "pending" else candidate.outcome] += 1
            if candidate.status in ("rejected", "quarantined"):
                reasons = "; ".join(v["message"] for v in (candidate.details or {}).get("violations", []))
                failures.append(f"{candidate.partition}: {candidate.status}: {reasons}")
    events = _batch_summaries(contract, [r.run_id for r in runs])
    for summary in events:
        for failure in summary.get("failures", []):
            outcomes["failed"] += 1
            failures.append(f"{failure['partition']}: fetch failed: {failure['reason']}")
    records = [_instance().get_run_record_by_id(r.run_id) for r in runs]
    starts = [r.start_time for r in records if r and r.start_time]
    ends = [r.end_time for r in records if r and r.end_time]
    total = sum(outcomes.values())
    seconds = (max(ends) - min(starts)) if starts and ends else 0.0
    rate = f", {total / seconds:.1f} targets/s over {seconds:.1f}s of runs" if seconds > 0 else ""
    print(f"{contract}: {total} target(s){rate}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    for line in failures[:50]:
        print(f"  {line}")
    if len(failures) > 50:
        print(f"  ... and {len(failures) - 50} more (see `scrape-contracts events {contract}`)")
    bad = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    for run in bad:
        print(f"run {run.run_id} ended {run.status.value}: see it in the Dagster UI (Runs) for the failed step")
    return 1 if bad else 0


def _batch_summaries(contract: str, run_ids: list[str]) -> list[dict]:
    from scrape_contracts.events import batch_summaries

    return batch_summaries(_instance(), contract, run_ids)
