"""``scrape-contracts targets add|list|discover``, ``run`` and ``reextract``: what is scraped, as runs."""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from pathlib import Path
from typing import Any

from scrape_contracts.cli import common
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
    p = targets.add_parser("discover", help="read a contract's discover: sources now (a run of "
                                            "discover_C_job, which materialises scrape/C/targets) and add "
                                            "the targets they list")
    p.add_argument("contract")
    p.set_defaults(func=cmd_targets_discover)
    for name in ("run", "reextract"):
        reextract = name == "reextract"
        p = sub.add_parser(name, help=(
            "extract, validate, heal and gate each target's last fetched page again, without fetching (after a "
            "contract edit), as batched runs" if reextract else
            "scrape a contract's targets as runs of the instance, idempotently"))
        p.add_argument("contract")
        p.add_argument("--partition", default=None,
                       help="one target, as one run (default: every target that is not paused, as batched runs "
                            "of the contract's batch_size)")
        p.add_argument("--idempotency-key", default=None,
                       help="the same key again starts nothing and prints the existing runs (default: a new key, "
                            "printed so the command can be repeated)")
        p.add_argument("--queue", action="store_true",
                       help="hand the runs to the instance's run queue (`dagster job launch`; a dagster-daemon "
                            "starts them with the instance's run launcher) instead of running them here")
        p.add_argument("--workspace", type=common.workspace_file,
                       default=str(common.REPO_ROOT / "workspace.yaml"),
                       help="with --queue: the workspace the daemon loads the runs' code from")
        p.add_argument("--wait", action="store_true",
                       help="with --queue: wait for the runs to finish and print the summary (runs started "
                            "here always end before the command does)")
        p.add_argument("--parallel", type=_processes, default=2, metavar="N",
                       help="without --queue: run up to N of the batched runs at once, each in a process of its "
                            "own (default 2; 1 runs them one after the other in this process)")
        p.add_argument("--timeout", type=_timeout, default=60.0, metavar="SECONDS",
                       help="with --queue --wait: give up (exit 1) when the runs are still queued after this long "
                            "and no dagster-daemon is running to start them (default 60)")
        if reextract:
            p.set_defaults(func=cmd_run, reextract=True, force=False)
        else:
            p.add_argument("--force", action="store_true",
                           help="fetch every page again without validators and extract it even when it did not "
                                "change")
            p.set_defaults(func=cmd_run, reextract=False)


def cmd_targets_add(args: argparse.Namespace) -> int:
    from scrape_contracts.defs.targets import add_targets

    loaded = common.contract(args, args.contract)
    instance = common.instance()
    try:
        added = add_targets(loaded, args.urls, instance, common.store())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key, url in added.items():
        print(f"added  {key}  {url}")
    print(f"{len(added)} new target(s) for {args.contract!r}")
    return 0


def cmd_targets_discover(args: argparse.Namespace) -> int:
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.launching import QUIET, failure_reason, run_in_process
    from scrape_contracts.defs.names import TRIGGER_TAG, discover_job_name

    loaded = common.contract(args, args.contract)
    name = loaded.contract.name
    if loaded.contract.discover is None:
        raise common.CliError(f"contract {name!r} has no discover: block; add its sitemaps or listing pages "
                              "(docs/discovery.md), or add targets with `scrape-contracts targets add`", 2)
    job = build_definitions(args.contracts_dir).resolve_job_def(discover_job_name(name))
    result = run_in_process(job, run_config=QUIET, instance=common.instance(), tags={TRIGGER_TAG: "cli"},
                            raise_on_error=False)
    if not result.success:
        raise common.CliError(f"discovery of {name!r} failed (run {result.run_id}): {failure_reason(result)}")
    (event,) = result.get_asset_materialization_events()
    found = {key: value.value for key, value in event.materialization.metadata.items()}
    print(f"{name}: {found['targets']} target(s) listed by {len(found['sources'])} source(s), "
          f"{found['fetched']} fetched: {found['new']} new, {found['back']} back, {found['gone']} gone, "
          f"{found['ignored']} ignored, {found['refused']} refused (run {result.run_id})")
    for source in found["sources"]:
        if not source["complete"]:
            print(f"  {common.printable(source['url'])}: not read in full, so none of its targets was marked "
                  f"gone: {common.printable(source['problems'][0])}")
    return 0


def cmd_targets_list(args: argparse.Namespace) -> int:
    from scrape_contracts.service.accepted import AcceptedDataError

    loaded = common.contract(args, args.contract)
    contract = loaded.contract
    try:
        store = common.store(existing=True)
    except AcceptedDataError:
        if contract.is_dynamic:  # its targets live in the store
            raise
        store = None  # nothing scraped yet: the YAML's targets, none paused
    if contract.is_dynamic:
        targets = store.list_targets(contract.name)
    else:
        targets = {t.partition_key: t.url for t in contract.static_targets}
    paused = store.paused_partitions(contract.name) if store is not None else {}
    gone = store.gone_targets(contract.name) if store is not None and contract.is_dynamic else {}
    for key, url in targets.items():
        note = f"  [paused: {common.printable(paused[key])}]" if key in paused else ""
        if key in gone:  # its source no longer lists it: kept, with its accepted data, and not swept
            note += f"  [gone since {gone[key]:%Y-%m-%d %H:%M} UTC]"
        # stores written before target URLs with credentials were refused may still hold some
        print(f"{key}  {without_userinfo(url)}{note}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import uuid
    import warnings

    if args.contracts_dir:
        # the runs (here, or the daemon's code server for --queue) read the contracts from here
        os.environ["SCRAPE_CONTRACTS_DIR"] = str(Path(args.contracts_dir).resolve())
    if not args.queue and not args.partition:
        from scrape_contracts import settings

        if settings.parse_workers() > 0:  # batched runs in this process: their workers' forkserver starts now
            from scrape_contracts.service.forkserver import start_forkserver

            start_forkserver()

    import dagster as dg

    from scrape_contracts.defs import launching
    from scrape_contracts.defs.partitions import partitions_for

    loaded = common.contract(args, args.contract)
    contract = loaded.contract
    instance = common.instance()
    keys: list[str] = []
    if args.partition:
        known = partitions_for(contract).get_partition_keys(dynamic_partitions_store=instance)
        if args.partition not in known:
            raise common.CliError(f"{contract.name!r} has no target {args.partition!r}; "
                                  f"see `scrape-contracts targets list {contract.name}`", 2)
    else:
        # paused, gone from their source, or (discover.skip_unchanged, unless --force) unchanged since lastmod
        paused = common.store().skipped_partitions(contract.name,
                                                   unchanged=contract.skips_unchanged and not args.force)
        all_keys = partitions_for(contract).get_partition_keys(dynamic_partitions_store=instance)
        keys = [k for k in all_keys if k not in paused]
        for key in sorted(set(all_keys) & set(paused)):
            how = "" if paused[key].startswith(("gone ", "unchanged:")) else ", paused"
            print(f"{contract.name}/{key}: skipped{how} ({paused[key]})")
        if not keys:
            print(f"nothing to scrape: every target of {contract.name!r} is paused, gone from its source or "
                  "unchanged since its lastmod")
            return 0
    key = args.idempotency_key
    if key is None:
        key = uuid.uuid4().hex[:16]
        print(f"idempotency key {key} (the same command with --idempotency-key {key} starts nothing twice)",
              flush=True)

    def report(spec: launching.RunSpec, run: dg.DagsterRun, started_now: bool) -> None:
        if not started_now:
            print(f"{spec.label}: already started with this key: run {run.run_id} ({run.status.value})")
        elif args.queue:
            print(f"{spec.label}: queued run {run.run_id} ({run.status.value})")
        else:
            print(f"{spec.label}: run {run.run_id} {run.status.value.lower()}", flush=True)

    specs = launching.run_specs(loaded, keys, idempotency_key=key, partition=args.partition,
                                force=args.force, reextract=args.reextract, all_targets=not args.partition)
    if not args.queue:
        from scrape_contracts.defs import build_definitions

        defs = build_definitions(args.contracts_dir)
        # What is loaded by now (Dagster, the definitions, the contract with every target) lives as long as the
        # command: out of the collector's generations, a full collection no longer walks it again and again
        # while the runs allocate their events (at 2,000 targets 0.61 s of collections in a 15.5-s run, 0.25 s
        # frozen; more objects at 20,000, docs/performance.md).
        gc.freeze()
        from scrape_contracts.defs.run_processes import RunProcessError, execute_in_processes

        again = f"the same command with --idempotency-key {key} starts the runs that did not start"
        try:
            if args.parallel > 1 and len(specs) > 1:
                runs = execute_in_processes(defs, instance, specs, args.parallel, report)
            else:
                runs = launching.execute(defs, instance, specs, report)
        except RunProcessError as exc:
            raise common.CliError(f"{exc}; {again}") from None
        except launching.Interrupted as exc:
            raise common.CliError(f"{exc}; {again}", 130) from None
        except KeyboardInterrupt:  # between runs, or waiting for the other processes' runs
            raise common.CliError(f"interrupted; {again}", 130) from None
        return _print_summary(contract.name, runs)
    try:
        with warnings.catch_warnings():
            # Dagster warns with the whole stack trace of a location that fails to load, then raises
            warnings.filterwarnings("ignore", message="Error loading repository location",
                                    category=UserWarning)
            runs = launching.queue(instance, args.workspace, specs, report)
    except launching.LaunchError as exc:
        raise common.CliError(f"cannot queue the runs with the code location of {args.workspace}: {exc}") from None
    if any(r.status == dg.DagsterRunStatus.QUEUED for r in runs) and not launching.daemon_running(instance):
        print(_DAEMON_HINT + (f"; waiting up to {args.timeout:g}s for one" if args.wait else ""), flush=True)
    if not args.wait:
        return 0
    try:
        finished = launching.wait(instance, [r.run_id for r in runs], give_up_after=args.timeout)
    except launching.NoDaemon as exc:
        raise common.CliError(f"{exc}: start one with the same DAGSTER_HOME "
                              "(`dagster-daemon run -w workspace.yaml`, or `scrape-contracts dev`), then run this "
                              "command again with the same --idempotency-key to wait for the same runs") from None
    return _print_summary(contract.name, finished)


_DAEMON_HINT = ("note: runs are queued and no dagster-daemon is running to start them: run `dagster-daemon run` "
                "(or `scrape-contracts dev`) with the same DAGSTER_HOME")


def _processes(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return count


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def _print_summary(contract: str, runs: list) -> int:
    """The outcome of the runs, and exit status 1 when a run failed or any target could not be scraped."""
    from collections import Counter

    import dagster as dg

    store = common.store()
    outcomes: Counter[str] = Counter()
    failures = []
    for run in runs:
        for candidate in store.candidates_of_run(run.run_id):
            outcomes[candidate.status if candidate.status != "pending" else candidate.outcome] += 1
            if candidate.status in ("rejected", "quarantined"):
                reasons = "; ".join(v["message"] for v in (candidate.details or {}).get("violations", []))
                failures.append(f"{candidate.partition}: {candidate.status}: {reasons}")
    not_fetched = [(f["partition"], str(f["reason"])) for summary in _batch_summaries(contract, [r.run_id for r in runs])
                   for f in summary.get("failures", [])]
    outcomes["failed"] += len(not_fetched)
    records = [common.instance().get_run_record_by_id(r.run_id) for r in runs]
    starts = [r.start_time for r in records if r and r.start_time]
    ends = [r.end_time for r in records if r and r.end_time]
    total = sum(outcomes.values())
    seconds = (max(ends) - min(starts)) if starts and ends else 0.0
    rate = f", {total / seconds:.1f} targets/s over {seconds:.1f}s of runs" if seconds > 0 else ""
    print(f"{contract}: {total} target(s){rate}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if v))
    for line in failures[:50]:
        print(f"  {common.printable(line)}")
    if len(failures) > 50:
        print(f"  ... and {len(failures) - 50} more (see `scrape-contracts events {contract}`)")
    _print_not_fetched(contract, not_fetched)
    bad = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
    for run in bad:
        lost = database_loss(_failure_texts(run.run_id))
        if lost is not None:
            print(f"run {run.run_id} ended {run.status.value}: {lost}; run the sweep again once the database "
                  "answers (a new --idempotency-key, or none): what was recorded is kept, nothing is accepted twice")
        else:
            print(f"run {run.run_id} ended {run.status.value}: see it in the Dagster UI (Runs) for the failed step")
    return 1 if bad or not_fetched else 0


# how a step that lost the database says so, first ours (adapters/store/outages.py), then the driver's
_GONE = re.compile(r"the project store at \S+ was unreachable for \d+ s: [^\n;]*")
_REFUSED = re.compile(r'connection to server at "([^"]+)", port (\d+) failed: ([^\n]*)')
_BROKEN = ("server closed the connection unexpectedly", "connection already closed",
           "too many retries for DB connection")


def database_loss(texts: list[str]) -> str | None:
    """One line for a run whose step failed because its worker lost the database, from the failure texts of
    the run's events (a worker's own step failure could not be written: its traceback reaches the run's
    failure through the executor); None for any other failure."""
    for pattern in (_GONE, _REFUSED):
        for text in texts:
            found = pattern.search(text)
            if found and pattern is _GONE:
                return found.group(0)
            if found:
                host, port, why = found.groups()
                return f"a worker could not reach the database at {host}:{port}: {why.strip()}"
    for text in texts:
        if any(mark in text for mark in _BROKEN):
            return "a worker lost its connection to the database (server closed the connection)"
    return None


def _failure_texts(run_id: str) -> list[str]:
    import dagster as dg

    failures = {dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.STEP_FAILURE}
    texts = []
    for entry in common.instance().all_logs(run_id, of_type=failures):
        event = entry.dagster_event
        error = getattr(event.event_specific_data, "error", None) if event is not None else None
        texts.append(f"{entry.message}\n{error.to_string() if error is not None else ''}")
    return texts


# what the pages' folder says when it is full (ENOSPC), however the fetch reported it
_DISK_FULL = ("no space left on device", "errno 28")


def _print_not_fetched(contract: str, failed: list[tuple[str, str]]) -> None:
    """Targets a batch could not scrape, said once with their count, grouped by reason (a full disk for
    pages fails every target the same way: it is said once, not once per target)."""
    if not failed:
        return
    from collections import defaultdict

    from scrape_contracts import settings

    print(f"{len(failed)} target(s) failed (see `scrape-contracts events {contract}`):")
    by_reason: dict[str, list[str]] = defaultdict(list)
    for partition, reason in failed:
        full = any(mark in reason.lower() for mark in _DISK_FULL)
        by_reason["no space left on device" if full else reason].append(partition)
    for reason, partitions in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        examples = ", ".join(partitions[:3]) + (f" and {len(partitions) - 3} more" if len(partitions) > 3 else "")
        if reason == "no space left on device":
            print(f"  no space left on device: {len(partitions)} target(s) could not store their pages ({examples}); "
                  f"free space in {settings.artifacts_dir()} (SCRAPE_CONTRACTS_ARTIFACTS_DIR) and run again")
        else:
            print(f"  {common.printable(reason[:300])}: {len(partitions)} target(s) ({examples})")


def _batch_summaries(contract: str, run_ids: list[str]) -> list[dict]:
    from scrape_contracts.defs.history import batch_summaries

    return batch_summaries(common.instance(), contract, run_ids)
