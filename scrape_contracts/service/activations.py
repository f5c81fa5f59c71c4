"""From outbox rows to delivered messages (Dagster-free: the delivery job, the CLI and tests call this).

An outbox row is a fact (accepted version n of a target, a quarantine, a pause, a heal). What it means to
whom is decided here, when it is delivered: the contract's data rules on the change from version n-1 to n,
and its operational routes (``on:``). Each resulting message has its own deterministic id, the one the
receiver sees in ``X-Scrape-Contracts-Event-Id``: uuid5 of contract, target, version and kind, where kind
is ``activation:<rule>`` for a data rule and the operational kind otherwise. A message already delivered
to a destination is never sent there again; a dead one is sent again only when replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from scrape_contracts import settings
from scrape_contracts.adapters.destinations import (
    DeliveryClient, DeliveryPolicy, DeliveryResult, DeliveryStatus, DestinationError, Destinations, OutgoingEvent, deliver,
    request_for,
)
from scrape_contracts.adapters.outbox import Delivery, OutboxRow, event_id
from scrape_contracts.adapters.statuses import DeliveryState, OutboxKind
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.activations import Activation, Operational
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.engine.activations import fired_rules, fired_set_rules
from scrape_contracts.engine.lists import is_set, set_records
from scrape_contracts.engine.set_checks import diff_sets


@dataclass(frozen=True)
class Message:
    """One event for one destination, because of one rule."""

    outbox_id: int
    rule: str
    destination: str
    event: OutgoingEvent


@dataclass(frozen=True)
class Sent:
    message: Message
    status: DeliveryState
    reason: str
    attempts: tuple[dict, ...]
    skipped: bool = False  # delivered before: not sent again


def asset_link(contract: str, partition: str) -> str:
    return f"{settings.dagster_ui_url()}/assets/scrape/{quote(contract)}?view=partitions&partition={quote(partition)}"


def _operational(row: OutboxRow, rule: Activation) -> tuple[Operational, ...]:
    """The operational kinds an outbox row stands for under ``rule`` (the ``on:`` values that route it)."""
    if row.kind == OutboxKind.FAILED:
        # one alert per streak: when it reaches the rule's length, not at every failure after that
        return (Operational.FAILING,) if row.data.get("streak") == rule.failing_after else ()
    if row.kind == OutboxKind.RECOVERED:
        return (Operational.RECOVERED,) if (row.data.get("ended_streak") or 0) >= rule.failing_after else ()
    if row.kind == OutboxKind.QUARANTINED:
        return (Operational.QUARANTINED,)
    if row.kind == OutboxKind.PAUSED:
        if row.data.get("cause") == "budget_exhausted":
            return (Operational.BUDGET_EXHAUSTED, Operational.PAUSED)
        return (Operational.PAUSED,)
    return ()


def _summary(row: OutboxRow) -> str:
    if row.kind == OutboxKind.QUARANTINED:
        return (f"waits for review: {row.data.get('reason')} (scrape-contracts review accept|reject "
                f"{row.contract} {row.partition} --reviewer ... --reason ...)")
    if row.kind == OutboxKind.PAUSED:
        return f"paused: {row.data.get('reason')}"
    if row.kind == OutboxKind.FAILED:
        return f"failing: {row.data.get('streak')} scrapes in a row failed or were rejected; last: {row.data.get('reason')}"
    if row.kind == OutboxKind.RECOVERED:
        return (f"recovered after {row.data.get('ended_streak')} failed or rejected scrapes"
                + ("; the page was read again and waits for review" if row.data.get("by") == "quarantined" else ""))
    return f"{row.kind.value}"


CANARY_RULE = "canary"


def canary_rule(contract: Contract, partition: str) -> Activation | None:
    """A canary target's alerts, as the operational rule they are: ``on: [failing, recovered]`` to its
    ``notify``. The same failure streak code counts for it (adapters/store/state.py ``count_streaks``), so the
    alert goes once per streak and the recovery only after an alert; and an ``on: failing`` rule to the same
    destination gives the same message id, delivered once."""
    canary = contract.canary_for(partition)
    if canary is None or not canary.notify:
        return None
    return Activation(name=CANARY_RULE, on=(Operational.FAILING, Operational.RECOVERED),
                      failing_after=canary.threshold, notify=canary.notify)


def has_routes(contract: Contract) -> bool:
    """Whether any outbox row of this contract can give a message (activations or canaries)."""
    return bool(contract.activations) or contract.has_canaries


def messages_for(row: OutboxRow, loaded: LoadedContract | None, store: ProjectStore) -> list[Message]:
    """What an outbox row gives under the contract's activations and canaries (none for a contract without)."""
    if loaded is None or not has_routes(loaded.contract):
        return []
    contract = loaded.contract
    link = asset_link(row.contract, row.partition)
    found = []
    if row.kind == OutboxKind.ACCEPTED and row.version is not None and row.data.get("previous_version"):
        versions = store.accepted_versions(row.contract, row.partition, [row.version - 1, row.version])
        old, new = versions.get(row.version - 1), versions.get(row.version)
        if old is not None and new is not None and is_set(new.record):
            found += _set_messages(row, contract, old.record, new.record, link)
        elif old is not None and new is not None:
            for fired in fired_rules(contract.activations, old.record, new.record, contract.fields):
                kind = f"activation:{fired.rule}"
                event = OutgoingEvent(
                    id=event_id(row.contract, row.partition, row.version, kind), kind=kind,
                    contract=row.contract, target=row.partition, version=row.version, rule=fired.rule,
                    summary=f"{fired.rule}: " + "; ".join(fired.reasons), reasons=fired.reasons,
                    record=fired.payload, link=link, occurred_at=row.created_at.timestamp(),
                    changes=tuple({"field": k, "old": old.record.get(k), "new": new.record.get(k)}
                                  for k in sorted(set(old.record) | set(new.record))
                                  if old.record.get(k) != new.record.get(k)))
                found += [Message(row.id, fired.rule, d, event) for d in fired.destinations]
    canary = canary_rule(contract, row.partition) if row.kind in (OutboxKind.FAILED, OutboxKind.RECOVERED) \
        else None
    for rule in [*contract.activations, *([canary] if canary else [])]:
        matched = [k for k in _operational(row, rule) if rule.on and k in rule.on]
        if not matched:
            continue
        kind = matched[0].value
        summary = ("canary " if rule is canary else "") + _summary(row)
        event = OutgoingEvent(
            id=event_id(row.contract, row.partition, row.version, kind), kind=kind, contract=row.contract,
            target=row.partition, version=row.version, rule=rule.name, summary=summary,
            reasons=tuple(str(r) for r in (row.data.get("reason"),) if r), link=link,
            occurred_at=row.created_at.timestamp())
        found += [Message(row.id, rule.name, d, event) for d in rule.notify]
    return found


def _set_messages(row: OutboxRow, contract: Any, old: dict[str, Any], new: dict[str, Any], link: str
                  ) -> list[Message]:
    """A list target's fired rules: one event per rule, with the records it held for."""
    before = set_records(old) if is_set(old) else None
    after = set_records(new)
    counts = diff_sets(before, after, contract.fields).counts() if before is not None else {}
    found = []
    for fired in fired_set_rules(contract.activations, before, after, contract.fields):
        kind = f"activation:{fired.rule}"
        event = OutgoingEvent(
            id=event_id(row.contract, row.partition, row.version, kind), kind=kind, contract=row.contract,
            target=row.partition, version=row.version, rule=fired.rule,
            summary=f"{fired.rule}: {fired.payload['count']} record(s): " + "; ".join(fired.reasons[:3]),
            reasons=fired.reasons, record=fired.payload, link=link, occurred_at=row.created_at.timestamp(),
            changes=({"set": counts},))
        found += [Message(row.id, fired.rule, d, event) for d in fired.destinations]
    return found


def _settled(before: Delivery | None, replay: bool = False) -> bool:
    """Whether a message with this delivery record is not to be sent (again)."""
    return before is not None and (before.status == DeliveryState.DELIVERED
                                   or (before.status == DeliveryState.DEAD and not replay))


def undelivered(store: ProjectStore, rows: Sequence[OutboxRow], contracts: Mapping[str, LoadedContract]
                ) -> list[Message]:
    """The messages of ``rows``, under the contracts as they are now, that no delivery has settled (delivered
    or dead): what the next delivery run over them would send (``deliveries list --status pending``)."""
    outbox = store.outbox()
    settled = {(d.message_id, d.destination) for d in outbox.deliveries(outbox_ids=[r.id for r in rows])
               if _settled(d)}
    return [m for row in rows for m in messages_for(row, contracts.get(row.contract), store)
            if (m.event.id, m.destination) not in settled]


def deliver_rows(store: ProjectStore, rows: Sequence[OutboxRow], contracts: Mapping[str, LoadedContract],
                 destinations: Destinations, *, run_id: str = "", replay: bool = False,
                 policy: DeliveryPolicy = DeliveryPolicy(), client: DeliveryClient | None = None,
                 sleep: Callable[[float], None] | None = None) -> list[Sent]:
    """Send every message of ``rows`` not delivered yet (and, with ``replay``, the dead ones again)."""
    outbox = store.outbox()
    own_client = client is None
    client = client or DeliveryClient()
    sent: list[Sent] = []
    try:
        for row in rows:
            for message in messages_for(row, contracts.get(row.contract), store):
                before = outbox.delivery(message.event.id, message.destination)
                if _settled(before, replay):
                    sent.append(Sent(message, before.status, "already " + before.status.value,
                                     tuple(before.history), skipped=True))
                    continue
                sent.append(_send(outbox, message, destinations, client, policy, sleep, run_id))
    finally:
        if own_client:
            client.close()
    return sent


def _send(outbox, message: Message, destinations: Destinations, client: DeliveryClient, policy: DeliveryPolicy,
          sleep: Callable[[float], None] | None, run_id: str) -> Sent:
    destination = destinations.get(message.destination)
    if destination is None:
        result, reason = None, (f"destination {message.destination!r} is not declared in destinations.yaml "
                                "(beside the contracts)")
    else:
        try:
            request = request_for(destination, message.event)
        except DestinationError as exc:
            result, reason = None, str(exc)
        else:
            result = deliver(request, client, policy, **({"sleep": sleep} if sleep else {}))
            reason = "delivered" if result.status == DeliveryStatus.DELIVERED else result.reason
    attempts = [{**a.as_dict(), "run_id": run_id} for a in (result.attempts if result else ())] or \
        [{"number": 1, "status": None, "duration_s": 0.0, "error": reason, "run_id": run_id}]
    status = DeliveryState.DELIVERED if _delivered(result) else DeliveryState.DEAD
    saved: Delivery = outbox.save_delivery(message.outbox_id, message.event.id, message.destination, message.rule,
                                           status, attempts)
    return Sent(message, status, reason, tuple(saved.history))


def _delivered(result: DeliveryResult | None) -> bool:
    return result is not None and result.status == DeliveryStatus.DELIVERED
