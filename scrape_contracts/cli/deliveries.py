"""``scrape-contracts deliveries list|replay``: what the outbox sent where, and sending dead ones again."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from scrape_contracts.cli import common


def register(sub: Any) -> None:
    deliveries = sub.add_parser("deliveries", help="outgoing events (activations): list them, replay dead ones"
                                ).add_subparsers(dest="deliveries_command", required=True)
    p = deliveries.add_parser("list", help="messages and their status: pending (not sent yet), delivered, dead")
    p.add_argument("--status", choices=["pending", "delivered", "dead"], help="only these")
    p.set_defaults(func=cmd_list)
    p = deliveries.add_parser("replay", help="send dead deliveries again, with the same event ids")
    p.add_argument("--message", help="only this message id (X-Scrape-Contracts-Event-Id); default: every dead one")
    p.set_defaults(func=cmd_replay)


def cmd_list(args: argparse.Namespace) -> int:
    from scrape_contracts.adapters.statuses import DeliveryState
    from scrape_contracts.defs.activations import awaiting_delivery
    from scrape_contracts.service.activations import undelivered

    store = common.store(existing=True)
    outbox = store.outbox()
    status = DeliveryState(args.status) if args.status else None
    found = outbox.deliveries(status=status)
    for d in found:
        last = d.history[-1] if d.history else {}
        why = last.get("error") or (f"HTTP {last.get('status')}" if last.get("status") else "")
        print(f"{d.message_id} {d.destination} ({d.rule}): {d.status.value} after {d.attempts} attempt(s)"
              + (f" — {why}" if d.status == DeliveryState.DEAD and why else ""))
    pending = 0
    if status in (None, DeliveryState.PENDING):
        # not sent yet: the messages of outbox rows no delivery run has finished with, under the rules now
        listed = {(d.message_id, d.destination) for d in found}
        contracts = common.load(args).by_name()
        for rows in awaiting_delivery(common.instance(), outbox):
            for m in undelivered(store, rows, contracts):
                if (m.event.id, m.destination) not in listed:
                    pending += 1
                    print(f"{m.event.id} {m.destination} ({m.rule}): pending — {m.event.kind} of "
                          f"{m.event.contract}/{m.event.target}, outbox row {m.outbox_id}")
    if not found and not pending:
        print("no deliveries" + (f" with status {args.status}" if args.status else ""))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from scrape_contracts.adapters.destinations import (
        DestinationError,
        load_destinations,
    )
    from scrape_contracts.adapters.statuses import DeliveryState
    from scrape_contracts.contract.loader import contracts_dir
    from scrape_contracts.service.activations import deliver_rows

    store = common.store(existing=True)
    outbox = store.outbox()
    dead = [d for d in outbox.deliveries(status=DeliveryState.DEAD) if not args.message or d.message_id == args.message]
    if not dead:
        print("nothing to replay: no dead deliveries" + (f" with message id {args.message}" if args.message else ""))
        return 0
    folder = Path(args.contracts_dir) if args.contracts_dir else contracts_dir()
    try:
        destinations = load_destinations(folder)
    except DestinationError as exc:
        raise common.CliError(str(exc)) from None
    wanted = {(d.message_id, d.destination) for d in dead}
    rows = outbox.by_ids(sorted({d.outbox_id for d in dead}))
    sent = [s for s in deliver_rows(store, rows, common.load(args).by_name(), destinations, run_id="cli-replay",
                                    replay=True)
            if (s.message.event.id, s.message.destination) in wanted]
    for s in sent:
        print(f"{s.message.event.id} {s.message.destination} ({s.message.rule}): {s.status.value}"
              + ("" if s.status == DeliveryState.DELIVERED else f" — {s.reason}"))
    return 0 if all(s.status == DeliveryState.DELIVERED for s in sent) else 1
