"""``scrape-contracts reconcile`` and ``failures``: a target stuck on a provider submission, or failing run
after run."""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

from scrape_contracts.cli import common


def register(sub: Any) -> None:
    p = sub.add_parser("reconcile", help="decide an indeterminate provider submission (adopt its job, or "
                                         "resubmit), then scrape the target")
    p.add_argument("contract")
    p.add_argument("partition")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--job-id", help="the provider's job for this target (its dashboard lists it by the "
                                      "label <contract>/<target>): the target's scrape polls it and checks "
                                      "its page")
    how.add_argument("--resubmit", action="store_true",
                     help="the provider has no job for it: submit a new one")
    p.add_argument("--by", default=os.environ.get("USER") or "unknown", help="who decides (default: $USER)")
    p.add_argument("--reason", default="", help="why, kept with the decision")
    p.add_argument("--no-scrape", action="store_true",
                   help="only record the decision; the next run scrapes it")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("failures", help="the targets whose last runs failed, grouped by reason (dead "
                                        "letters); --replay scrapes them again as one batch")
    p.add_argument("contract")
    p.add_argument("--last", type=_at_least_one, default=3, metavar="N",
                   help="list a target when its last N runs failed (default 3)")
    p.add_argument("--replay", action="store_true",
                   help="scrape the listed targets that are not paused again, as one batched run of the "
                        "contract's failures job, then list what still fails")
    p.set_defaults(func=cmd_failures)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from scrape_contracts.defs import build_definitions, launching
    from scrape_contracts.defs.names import RECONCILE_JOB

    loaded = common.contract(args, args.contract)
    name, adapter = loaded.contract.name, loaded.contract.fetch.adapter
    if adapter != "provider":  # said before any run is made
        raise common.CliError(f"{name!r} does not fetch through a provider (fetch.adapter is {adapter!r}): "
                              "nothing to reconcile")
    store = common.store(existing=True)
    instance = common.instance()
    config = {"contract": name, "partition": args.partition, "job_id": args.job_id,
              "resubmit": args.resubmit, "by": args.by, "reason": args.reason}
    defs = build_definitions(args.contracts_dir)
    # a run of reconcile_job on the instance: the decision is in run history with who and why
    decided = launching.run_in_process(
        defs.resolve_job_def(RECONCILE_JOB), run_config={**launching.QUIET, "ops": {"reconcile_submission": {"config": config}}},
        instance=instance, raise_on_error=False, tags={"scrape_contracts/trigger": "cli"})
    if not decided.success:
        raise common.CliError(f"{launching.failure_reason(decided)} (run {decided.run_id})")
    job = store.provider_jobs(name, args.partition)[-1]
    what = f"adopted provider job {job.job_id}" if args.job_id else \
        "submission abandoned; a new job will be submitted"
    print(f"{name}/{args.partition}: {what} (run {decided.run_id})")
    if args.no_scrape:
        print(f"the next run of {name} scrapes it "
              f"(`scrape-contracts run {name} --partition {args.partition}`)")
        return 0
    specs = launching.run_specs(loaded, [], idempotency_key=f"reconcile-{decided.run_id}",
                                partition=args.partition)
    [run] = launching.execute(defs, instance, specs, lambda *_: None)
    return _scraped(store, name, args.partition, run)


def _scraped(store: Any, name: str, partition: str, run: Any) -> int:
    import dagster as dg

    candidates = store.candidates_of_run(run.run_id)
    if run.status == dg.DagsterRunStatus.SUCCESS and candidates:
        latest = store.latest_accepted(name, partition)
        status = candidates[-1].status
        accepted = latest is not None and status == "accepted"
        print(f"{name}/{partition}: scraped by run {run.run_id}: "
              + (f"accepted as v{latest.version} {latest.record}" if accepted else str(status)))
        return 0
    if candidates:
        reasons = "; ".join(v["message"] for v in (candidates[-1].details or {}).get("violations", []))
        print(f"{name}/{partition}: scraped by run {run.run_id}: {candidates[-1].status} by the contract's "
              "checks" + (f": {common.printable(reasons)}" if reasons else "")
              + " (the last accepted data stays)")
        return 1
    print(f"{name}/{partition}: run {run.run_id} ended {run.status.value}: see it in the Dagster UI (Runs), "
          f"or `scrape-contracts events {name} --partition {partition}`")
    return 1


def cmd_failures(args: argparse.Namespace) -> int:
    from scrape_contracts.service.failures import count, dead_letters, replayable

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    name = loaded.contract.name
    groups = dead_letters(store, loaded, last=args.last)
    _print_groups(name, groups, args.last)
    if not args.replay or not groups:
        return 0
    keys = replayable(groups)
    if not keys:
        print("nothing to replay: every listed target is paused (resume it first)")
        return 1
    from scrape_contracts.defs import build_definitions, launching
    from scrape_contracts.defs.names import failures_job_name

    run_id = launching.idempotent_run_id(name, "replay", uuid.uuid4().hex)
    spec = launching.RunSpec(failures_job_name(name), run_id,
                             {"scrape_contracts/contract": name, "scrape_contracts/trigger": "cli-replay"},
                             {"ops": {f"{name}_failures": {"config": {"last": args.last, "replay": True}}}})
    defs = build_definitions(args.contracts_dir)
    [run] = launching.execute(defs, common.instance(), [spec], lambda *_: None)
    print(f"replayed {len(keys)} target(s) as one batch: run {run.run_id} {run.status.value.lower()}")
    remaining = dead_letters(store, loaded, last=args.last)
    if remaining:
        _print_groups(name, remaining, args.last)
    else:
        print(f"{name}: no target fails its last {args.last} run(s) now")
    return 0 if run.status.value == "SUCCESS" and count(remaining) == 0 else 1


def _print_groups(name: str, groups: list, last: int) -> None:
    from scrape_contracts.service.failures import count

    if not groups:
        print(f"{name}: no target failed its last {last} run(s)")
        return
    print(f"{name}: {count(groups)} target(s) failed their last {last} run(s), "
          f"for {len(groups)} reason(s):")
    for group in groups:
        print(f"  {common.printable(group.reason)}: {len(group.targets)} target(s)")
        for letter in group.targets:
            paused = f"  [paused: {common.printable(letter.paused)[:120]}]" if letter.paused else ""
            print(f"    {letter.partition}  {letter.streak} failed in a row  {letter.url}{paused}")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value
