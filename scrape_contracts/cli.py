"""``scrape-contracts``: validate contracts, run the demo, manage targets, review, read the event trail."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any
from pathlib import Path

from scrape_contracts.contract.loader import LoadResult, load_contracts
from scrape_contracts.contract.model import without_userinfo

REPO_ROOT = Path(__file__).resolve().parents[1]
# Dagster reads an instance's config from $DAGSTER_HOME/dagster.yaml only; the demo and `dev` put this one there
# the laptop instance config; demo and dev copy it into DAGSTER_HOME (Dagster reads it only there)
LOCAL_INSTANCE_YAML = REPO_ROOT / "dagster.yaml"


class CliError(Exception):
    """A mistake the user can fix: printed as one ``error:`` line, exit status ``code``, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default prints the whole usage first; one line and where to look is enough
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _load(args: argparse.Namespace) -> LoadResult:
    return load_contracts(args.contracts_dir)


def _contract(args: argparse.Namespace, name: str):  # -> LoadedContract
    result = _load(args)
    loaded = result.by_name().get(name)
    if loaded is None:
        known = ", ".join(sorted(result.by_name())) or "none"
        raise CliError(f"no valid contract named {name!r} (valid contracts: {known}); "
                       "run `scrape-contracts validate` to see load errors")
    return loaded


def cmd_validate(args: argparse.Namespace) -> int:
    result = _load(args)
    for loaded in result.contracts:
        contract = loaded.contract
        kind = "dynamic" if contract.is_dynamic else f"{len(contract.static_targets)} targets"
        print(f"ok     {loaded.path}: contract {contract.name!r} ({kind}, {len(contract.fields)} fields)")
    for error in result.errors:
        print(f"error  {error}")
    print(f"{len(result.contracts)} valid contract(s), {len(result.errors)} error(s)")
    return 1 if result.errors else 0


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


def cmd_review(args: argparse.Namespace) -> int:
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.launch import QUIET, failure_reason

    loaded = _contract(args, args.contract)
    store = _store(existing=True)
    instance = _instance()
    _require_target(loaded, args.partition, instance, store)
    config = {"contract": loaded.contract.name, "partition": args.partition, "decision": args.decision,
              "reviewer": args.reviewer, "reason": args.reason}
    if args.candidate is not None:
        config["candidate_id"] = args.candidate
    defs = build_definitions(args.contracts_dir)
    # a real run of review_job on the instance: the decision is in run history with who and why
    result = defs.resolve_job_def("review_job").execute_in_process(
        run_config={**QUIET, "ops": {"review_decision": {"config": config}}}, instance=instance,
        raise_on_error=False)
    if not result.success:
        raise CliError(f"{failure_reason(result)} (run {result.run_id})")
    print(f"{args.decision}ed {loaded.contract.name}/{args.partition} (run {result.run_id})")
    latest = store.latest_accepted(loaded.contract.name, args.partition)
    if latest is not None:
        print(f"accepted now: v{latest.version} {latest.record}")
    return 0


def _require_target(loaded, partition: str, instance, store) -> None:
    from scrape_contracts.defs.partitions import partitions_for

    name = loaded.contract.name
    keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=instance)
    if partition not in keys and partition not in store.list_targets(name):
        raise CliError(f"{name!r} has no target {partition!r}; see `scrape-contracts targets list {name}`", 2)


def cmd_resume(args: argparse.Namespace) -> int:
    import dagster as dg

    from scrape_contracts.defs.assets import candidate_key, target_state_observation

    loaded = _contract(args, args.contract)
    store = _store(existing=True)
    _require_target(loaded, args.partition, _instance(), store)
    before = store.state(loaded.contract.name, args.partition)
    if not before.paused:
        print(f"{loaded.contract.name}/{args.partition} is not paused")
        return 0
    store.resume(loaded.contract.name, args.partition)
    reason = f"resumed by hand (was: {before.pause_reason})"
    _instance().report_runless_asset_event(dg.AssetObservation(
        asset_key=candidate_key(loaded.contract.name), partition=args.partition,
        metadata={"stage": "resumed", "reason": reason}, description=f"resumed: {reason}"))
    _instance().report_runless_asset_event(target_state_observation(loaded.contract.name, args.partition, None))
    print(f"resumed {loaded.contract.name}/{args.partition} (was paused: {before.pause_reason})")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    import dagster as dg

    from scrape_contracts.adapters.store import StoreError
    from scrape_contracts.defs.assets import candidate_key, target_state_observation
    from scrape_contracts.service import targets

    loaded = _contract(args, args.contract)
    store = _store()  # a target can be paused before its first scrape
    _require_target(loaded, args.partition, _instance(), store)
    try:
        change = targets.pause(store, loaded.contract.name, args.partition, by=args.by, reason=args.reason)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _instance().report_runless_asset_event(dg.AssetObservation(
        asset_key=candidate_key(loaded.contract.name), partition=args.partition,
        metadata={"stage": "paused", "reason": change.reason, "by": args.by}, description=f"paused: {change.reason}"))
    _instance().report_runless_asset_event(target_state_observation(loaded.contract.name, args.partition,
                                                                    change.reason))
    print(f"paused {loaded.contract.name}/{args.partition}: {change.reason} "
          f"(schedules and batches skip it until `scrape-contracts resume {loaded.contract.name} {args.partition}`)")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from scrape_contracts.events import read_trail

    loaded = _contract(args, args.contract)
    store = _store(existing=True)
    instance = _instance()
    if args.partition is not None:
        _require_target(loaded, args.partition, instance, store)
    events, cursor = read_trail(instance, loaded.contract.name, partition=args.partition, after=args.after,
                                limit=args.limit)
    for event in events:
        print(event.line())
    print(f"cursor: {cursor}  (next page: --after {cursor})")
    return 0


def cmd_selectors(args: argparse.Namespace) -> int:
    loaded = _contract(args, args.contract)
    history = _store(existing=True).selector_history(loaded.contract.name)
    if not history:
        print(f"{loaded.contract.name}: no selector versions yet (version 1 is written on the first run)")
    for version in history:
        origin = "from the contract YAML" if version.source == "contract" else (
            f"healed in run {version.run_id} ({version.partition})")
        print(f"v{version.version} (parent v{version.parent_version or '-'}) {origin} at {version.created_at:%Y-%m-%d %H:%M}")
        for name, selector in version.selectors.items():
            change = version.changes.get(name)
            if change and "kept" in change:
                print(f"    {name}: {selector!r} (healed; kept: the contract's selector for it did not change)")
            elif change and "dropped" in change:
                print(f"    {name}: {selector!r} (the contract's; healed {change['dropped']!r} dropped: "
                      "the contract's selector for it changed)")
            elif change:
                strategy = (change.get("evidence") or {}).get("strategy", "?")
                print(f"    {name}: {change['old']!r} -> {selector!r} "
                      f"(confidence {change.get('confidence', 0):.2f}, {strategy})")
            else:
                print(f"    {name}: {selector!r}")
    return 0


def cmd_db_current(args: argparse.Namespace) -> int:
    """The schema revision of the project store, changing nothing."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import schema_state
    from scrape_contracts.reader import _shown

    import sqlalchemy as sa

    url = settings.db_url()
    database = sa.engine.make_url(url).database
    if url.startswith("sqlite") and database not in (None, "", ":memory:") and not Path(database).is_file():
        raise CliError(f"no project store at {_shown(url)} (the file does not exist): check DAGSTER_HOME or "
                       "SCRAPE_CONTRACTS_DB_URL")
    print(f"{_shown(url)}: schema revision {schema_state(url).describe()}")
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Bring the project store's schema to this release's newest revision (what opening it does anyway)."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import upgrade_schema
    from scrape_contracts.reader import _shown

    url = settings.db_url()
    if url.startswith("sqlite"):
        settings.dagster_home().mkdir(parents=True, exist_ok=True)
    before, after = upgrade_schema(url)
    if before == after:
        print(f"{_shown(url)}: already at schema revision {after} (head)")
    else:
        print(f"{_shown(url)}: upgraded the schema from {before or 'an empty database'} to {after} (head)")
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
                             force=args.force, reextract=getattr(args, "reextract", False))
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


def cmd_demo(args: argparse.Namespace) -> int:
    from scrape_contracts.demo import run_demo

    home_set = bool(os.environ.get("DAGSTER_HOME"))
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    if not home_set:
        # the demo's own instance: start clean so every run of the demo tells the same story
        shutil.rmtree(home, ignore_errors=True)
        os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(LOCAL_INSTANCE_YAML, home / "dagster.yaml")
    return run_demo(home)


def cmd_dev(args: argparse.Namespace) -> int:
    """``dagster dev`` (the webserver and the daemon) on the instance in DAGSTER_HOME, the demo's by default."""
    from scrape_contracts import settings

    home = settings.dagster_home()
    if not (home / "scrape_contracts.db").exists() and not os.environ.get("SCRAPE_CONTRACTS_DB_URL"):
        told = f"DAGSTER_HOME={home}" if os.environ.get("DAGSTER_HOME") else \
            f"DAGSTER_HOME is not set, so ./.dagster_home of {os.getcwd()} was used"
        raise CliError(f"nothing has been scraped into this instance ({told}): run `scrape-contracts demo` "
                       "here first, or set DAGSTER_HOME to your instance folder")
    if not (home / "dagster.yaml").exists():
        shutil.copy(LOCAL_INSTANCE_YAML, home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    # `dagster dev` opens with a warning that `dg dev` supersedes it (a CLI this project does not install)
    superseded = "ignore:Function `dev_command` is superseded"
    env["PYTHONWARNINGS"] = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), superseded) if w)
    if args.contracts_dir:
        env["SCRAPE_CONTRACTS_DIR"] = str(Path(args.contracts_dir).resolve())
    print(f"Dagster UI on http://{args.host}:{args.port} for DAGSTER_HOME={home} (webserver and daemon; "
          "Ctrl-C stops both)", flush=True)
    dagster = Path(sys.executable).parent / "dagster"
    command = [str(dagster), "dev", "-w", str(Path(args.workspace).resolve()), "-h", args.host,
               "-p", str(args.port)]
    # the dev server in this process's place: Ctrl-C and signals reach it as if it had been started by hand
    os.chdir(home)  # `dagster dev` warns about a dagster.yaml in its working folder that is not DAGSTER_HOME's
    os.execve(str(dagster), command, env)
    return 0  # pragma: no cover - execve does not return


_INSTANCES: dict[str, Any] = {}


def _instance():
    """The instance in DAGSTER_HOME, opened once per command (each opening costs about 0.3 s)."""
    import dagster as dg

    from scrape_contracts import settings

    home = settings.dagster_home()
    if str(home) in _INSTANCES:
        return _INSTANCES[str(home)]
    try:
        home.mkdir(parents=True, exist_ok=True)
        # resolved: Dagster refuses a relative DAGSTER_HOME
        os.environ["DAGSTER_HOME"] = str(home)
        return _INSTANCES.setdefault(str(home), dg.DagsterInstance.get())
    except (OSError, dg.DagsterError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"cannot open the Dagster instance in DAGSTER_HOME={home}: {first}; "
                       "set DAGSTER_HOME to a writable folder (the demo's is ./.dagster_home)") from None


def _store(*, existing: bool = False):
    """The project store; ``existing``: refuse (one line naming the setting) rather than create an empty one."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.reader import open_store

    if existing:
        return open_store()
    settings.dagster_home().mkdir(parents=True, exist_ok=True)
    return ProjectStore(settings.db_url())


def _workspace_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no workspace file at {text}: pass the project's workspace.yaml")
    return text


def _said(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: the trail records it")
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scrape-contracts", description=__doc__)
    parser.add_argument("--contracts-dir", default=None,
                        help="folder of contract YAML files (default: $SCRAPE_CONTRACTS_DIR or ./contracts)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="load every contract and report each mistake (exit 1 if any)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("demo", help="offline demo: scrape, heal and quarantine on the example site")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dev", help="the Dagster UI and daemon on the demo's instance (or DAGSTER_HOME's), "
                                   "in one command")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--workspace", type=_workspace_file, default=str(REPO_ROOT / "workspace.yaml"))
    p.set_defaults(func=cmd_dev)

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

    p = sub.add_parser("review", help="accept or reject the quarantined candidate of a target")
    p.add_argument("decision", choices=["accept", "reject"])
    p.add_argument("contract")
    p.add_argument("partition")
    p.add_argument("--reviewer", type=_said, required=True)
    p.add_argument("--reason", type=_said, required=True)
    p.add_argument("--candidate", type=int, default=None, help="the candidate id you reviewed (refused if stale)")
    p.set_defaults(func=cmd_review)

    p = sub.add_parser("resume", help="resume a paused target (pending review or healing budget exhausted)")
    p.add_argument("contract")
    p.add_argument("partition")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("pause", help="stop scraping a target until it is resumed (its accepted data stays)")
    p.add_argument("contract")
    p.add_argument("partition")
    p.add_argument("--reason", required=True)
    p.add_argument("--by", default=os.environ.get("USER") or "unknown",
                   help="who pauses it (default: $USER)")
    p.set_defaults(func=cmd_pause)

    p = sub.add_parser("events", help="the event trail of a contract from run history, oldest first")
    p.add_argument("contract")
    p.add_argument("--partition", default=None)
    p.add_argument("--after", type=int, default=0, help="cursor printed by a previous call")
    p.add_argument("--limit", type=_positive_int, default=100,
                   help="stored events per page (read from run history in pages Dagster accepts)")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("selectors", help="selector versions of a contract and how each came to be")
    p.add_argument("contract")
    p.set_defaults(func=cmd_selectors)

    from scrape_contracts import cli_deliveries

    cli_deliveries.register(sub)

    from scrape_contracts import cli_frontdoor

    cli_frontdoor.register(sub)

    db = sub.add_parser("db", help="the project store's schema: current revision, upgrade").add_subparsers(
        dest="db_command", required=True)
    p = db.add_parser("current", help="print the store's schema revision (changes nothing)")
    p.set_defaults(func=cmd_db_current)
    p = db.add_parser("upgrade", help="upgrade the store's schema now (run once before rolling out a release; "
                                      "opening the store does it too)")
    p.set_defaults(func=cmd_db_upgrade)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sqlalchemy.exc import OperationalError

    from scrape_contracts.adapters.store import StoreError
    from scrape_contracts.reader import AcceptedDataError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except (AcceptedDataError, StoreError, ValueError) as exc:
        # the store's refusals and the settings' checks are written for the user; a traceback adds nothing
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OperationalError as exc:
        from scrape_contracts.reader import _shown
        from scrape_contracts import settings

        first = str(exc.orig or exc).strip().splitlines()[0]
        print(f"error: cannot use the project store at {_shown(settings.db_url())}: {first}; "
              "check SCRAPE_CONTRACTS_DB_URL (or DAGSTER_HOME)", file=sys.stderr)
        return 1
    finally:
        for instance in _INSTANCES.values():
            instance.dispose()
        _INSTANCES.clear()  # one command's instance: the next main() (tests, embedding) opens its own


def console() -> None:
    """The ``scrape-contracts`` command: ``main()``, then an exit that skips tearing the interpreter down.

    Freeing the objects Dagster leaves behind took 0.5–2 s after the last line was printed, a large part of
    a short command such as ``run --wait`` on an unchanged sweep. Exit handlers still run and non-daemon
    threads are waited for; only the teardown of modules and objects is skipped, as ``os._exit`` does.
    """
    import atexit
    import threading

    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # `| head` closed it: what it wanted was written
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
