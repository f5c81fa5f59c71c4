"""``scrape-contracts review`` (list, show, accept, reject), ``pause``, ``resume``, ``events`` and ``selectors``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from scrape_contracts.cli import common


def register(sub: Any) -> None:
    review = sub.add_parser("review", help="what waits for review (list, show); accept or reject it").add_subparsers(
        dest="decision", required=True)
    for decision in ("accept", "reject"):
        p = review.add_parser(decision, help=f"{decision} the quarantined candidate of a target (a provider's "
                                             "repair proposal is checked again before it is accepted)")
        p.add_argument("contract")
        p.add_argument("partition")
        p.add_argument("--reviewer", type=_said, required=True)
        p.add_argument("--reason", type=_said, required=True)
        p.add_argument("--candidate", type=int, default=None,
                       help="the candidate id you reviewed (refused if stale)")
        p.set_defaults(func=cmd_review)
    p = review.add_parser("list", help="the targets of a contract waiting for review, and why")
    p.add_argument("contract")
    p.set_defaults(func=cmd_review_list)
    p = review.add_parser("show", help="the candidate a target waits on: its record, why, a repair proposal")
    p.add_argument("contract")
    p.add_argument("partition")
    p.set_defaults(func=cmd_review_show)

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


def cmd_review(args: argparse.Namespace) -> int:
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.launching import QUIET, failure_reason, run_in_process

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    instance = common.instance()
    _require_target(loaded, args.partition, instance, store)
    config = {"contract": loaded.contract.name, "partition": args.partition, "decision": args.decision,
              "reviewer": args.reviewer, "reason": args.reason}
    if args.candidate is not None:
        config["candidate_id"] = args.candidate
    defs = build_definitions(args.contracts_dir)
    # a real run of review_job on the instance: the decision is in run history with who and why
    result = run_in_process(
        defs.resolve_job_def("review_job"), run_config={**QUIET, "ops": {"review_decision": {"config": config}}}, instance=instance,
        raise_on_error=False)
    if not result.success:
        raise common.CliError(f"{failure_reason(result)} (run {result.run_id})")
    print(f"{args.decision}ed {loaded.contract.name}/{args.partition} (run {result.run_id})")
    latest = store.latest_accepted(loaded.contract.name, args.partition)
    if latest is not None:
        print(f"accepted now: v{latest.version} {latest.record}")
    return 0


def cmd_review_list(args: argparse.Namespace) -> int:
    from scrape_contracts.service.repair_review import proposal_of

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    name = loaded.contract.name
    waiting = sorted((c for c in store.latest_candidates(name).values() if c.status == "quarantined"),
                     key=lambda c: c.partition)
    if not waiting:
        print(f"{name}: nothing waits for review")
        return 0
    print(f"{name}: {len(waiting)} target(s) wait for review:")
    for candidate in waiting:
        proposal = proposal_of(store, candidate)
        why = (f"provider repair proposed: {proposal.describe()}" if proposal is not None
               and proposal.state == "proposed" else _reasons(candidate))
        print(common.printable(f"  {candidate.partition}  candidate {candidate.id}  {why}"))
    print(f"(details: scrape-contracts review show {name} TARGET)")
    return 0


def cmd_review_show(args: argparse.Namespace) -> int:
    import json

    from scrape_contracts.service.repair_review import proposal_of

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    name = loaded.contract.name
    _require_target(loaded, args.partition, common.instance(), store)
    candidate = store.pending_review(name, args.partition)
    if candidate is None:
        print(f"{name}/{args.partition}: nothing waits for review")
        return 0
    latest = store.latest_accepted(name, args.partition)
    lines = [f"{name}/{args.partition}: candidate {candidate.id} (run {candidate.run_id}) quarantined",
             f"  url: {candidate.url}",
             f"  record: {json.dumps(candidate.record, default=str)}",
             f"  accepted now: " + (f"v{latest.version} {json.dumps(latest.record, default=str)}" if latest
                                    else "nothing yet"),
             f"  why: {_reasons(candidate)}"]
    proposal = proposal_of(store, candidate)
    if proposal is not None:
        lines.append(f"  provider repair {proposal.repair_id} (proposal {proposal.id}, {proposal.state}; "
                     f"job {proposal.job_id}, page {proposal.page_sha256}, cost {proposal.cost}):")
        for field, selector in proposal.selectors.items():
            value = f", reads {proposal.values[field]!r}" if field in proposal.values else ""
            lines.append(f"    {field}: {proposal.fields.get(field)!r} -> {selector!r}{value}")
        lines.append("  accept applies the proposal to that page and checks the record; reject discards it")
    lines.append(f"  decide: scrape-contracts review accept|reject {name} {args.partition} --reviewer WHO "
                 "--reason WHY")
    for line in lines:
        print(common.printable(line))
    return 0


def _reasons(candidate) -> str:
    violations = (candidate.details or {}).get("violations") or []
    return "; ".join(v.get("message", "") for v in violations) or str(candidate.outcome)


def _require_target(loaded, partition: str, instance, store) -> None:
    from scrape_contracts.defs.partitions import partitions_for

    name = loaded.contract.name
    keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=instance)
    if partition not in keys and partition not in store.list_targets(name):
        raise common.CliError(f"{name!r} has no target {partition!r}; see `scrape-contracts targets list {name}`", 2)


def cmd_resume(args: argparse.Namespace) -> int:
    import dagster as dg

    from scrape_contracts.defs.assets import target_state_observation
    from scrape_contracts.defs.names import candidate_key

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    _require_target(loaded, args.partition, common.instance(), store)
    before = store.state(loaded.contract.name, args.partition)
    if not before.paused:
        print(f"{loaded.contract.name}/{args.partition} is not paused")
        return 0
    store.resume(loaded.contract.name, args.partition)
    reason = f"resumed by hand (was: {before.pause_reason})"
    common.instance().report_runless_asset_event(dg.AssetObservation(
        asset_key=candidate_key(loaded.contract.name), partition=args.partition,
        metadata={"stage": "resumed", "reason": reason}, description=f"resumed: {reason}"))
    common.instance().report_runless_asset_event(target_state_observation(loaded.contract.name, args.partition, None))
    print(f"resumed {loaded.contract.name}/{args.partition} (was paused: {common.printable(before.pause_reason or '')})")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    import dagster as dg

    from scrape_contracts.adapters.store import StoreError
    from scrape_contracts.defs.assets import target_state_observation
    from scrape_contracts.defs.names import candidate_key
    from scrape_contracts.service import targets

    loaded = common.contract(args, args.contract)
    store = common.store()  # a target can be paused before its first scrape
    _require_target(loaded, args.partition, common.instance(), store)
    try:
        change = targets.pause(store, loaded.contract.name, args.partition, by=args.by, reason=args.reason)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    common.instance().report_runless_asset_event(dg.AssetObservation(
        asset_key=candidate_key(loaded.contract.name), partition=args.partition,
        metadata={"stage": "paused", "reason": change.reason, "by": args.by}, description=f"paused: {change.reason}"))
    common.instance().report_runless_asset_event(target_state_observation(loaded.contract.name, args.partition,
                                                                    change.reason))
    print(f"paused {loaded.contract.name}/{args.partition}: {change.reason} "
          f"(schedules and batches skip it until `scrape-contracts resume {loaded.contract.name} {args.partition}`)")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from scrape_contracts.defs.history import read_trail

    loaded = common.contract(args, args.contract)
    store = common.store(existing=True)
    instance = common.instance()
    if args.partition is not None:
        _require_target(loaded, args.partition, instance, store)
    events, cursor = read_trail(instance, loaded.contract.name, partition=args.partition, after=args.after,
                                limit=args.limit)
    for event in events:
        # reasons, reviewers and page values were typed by someone: a terminal must not obey them
        print(common.printable(event.line()))
    print(f"cursor: {cursor}  (next page: --after {cursor})")
    return 0


def cmd_selectors(args: argparse.Namespace) -> int:
    loaded = common.contract(args, args.contract)
    history = common.store(existing=True).selector_history(loaded.contract.name)
    if not history:
        print(f"{loaded.contract.name}: no selector versions yet (version 1 is written on the first run)")
    for version in history:
        origin = "from the contract YAML" if version.source == "contract" else (
            f"provider repair approved in run {version.run_id} ({version.partition})"
            if version.source == "provider_repair" else f"healed in run {version.run_id} ({version.partition})")
        print(f"v{version.version} (parent v{version.parent_version or '-'}) {origin} at {version.created_at:%Y-%m-%d %H:%M}")
        for name, selector in version.selectors.items():
            change = version.changes.get(name)
            if change and "kept" in change:
                print(f"    {name}: {selector!r} (healed; kept: the contract's selector for it did not change)")
            elif change and "dropped" in change:
                print(f"    {name}: {selector!r} (the contract's; healed {change['dropped']!r} dropped: "
                      "the contract's selector for it changed)")
            elif change and (change.get("evidence") or {}).get("strategy") == "provider_repair":
                evidence = change["evidence"]
                print(f"    {name}: {change['old']!r} -> {selector!r} (provider repair {evidence.get('repair_id')}, "
                      f"approved by {evidence.get('approved_by')}: {evidence.get('reason')})")
            elif change:
                strategy = (change.get("evidence") or {}).get("strategy", "?")
                print(f"    {name}: {change['old']!r} -> {selector!r} "
                      f"(confidence {change.get('confidence', 0):.2f}, {strategy})")
            else:
                print(f"    {name}: {selector!r}")
    return 0


def _said(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: the trail records it")
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value
