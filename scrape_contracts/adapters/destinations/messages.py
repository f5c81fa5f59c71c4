"""An outgoing event, and the HTTP request each kind of destination expects for it."""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from scrape_contracts.contract.destinations import (
    DestinationError, SlackDestination, TelegramDestination, WebhookDestination, resolve,
)
from scrape_contracts.adapters.fetch.secrets import expand_header_values
from scrape_contracts.adapters.outbox import event_id
from scrape_contracts.adapters.destinations.signing import EVENT_ID_HEADER, signature_headers

@dataclass(frozen=True)
class OutgoingEvent:
    id: str
    kind: str  # "activation:<rule>" or an operational kind (quarantined, failing, ...)
    contract: str
    target: str
    summary: str
    version: int | None = None
    rule: str | None = None
    occurred_at: float = field(default_factory=time.time)
    reasons: tuple[str, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)
    changes: tuple[dict[str, Any], ...] = ()
    link: str | None = None

    def body(self) -> dict[str, Any]:
        data = asdict(self)
        data["occurred_at"] = datetime.fromtimestamp(self.occurred_at, timezone.utc).isoformat()
        data["reasons"], data["changes"] = list(self.reasons), list(self.changes)
        return data


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]
    # what a log line or an error may show: never a token or a secret-bearing URL
    shown_as: str
    # the destination's ``allow_private_addresses``: the address guard lets a receiver on this machine through
    allow_private_addresses: bool = False


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")


def request_for(destination: WebhookDestination | SlackDestination | TelegramDestination, event: OutgoingEvent,
                *, now: float | None = None) -> Request:
    """The request that delivers ``event`` to ``destination`` (secrets resolved from the environment now)."""
    private = destination.allow_private_addresses
    if isinstance(destination, WebhookDestination):
        body = _json(event.body())
        timestamp = int(time.time() if now is None else now)
        headers = {**_expanded(destination), "Content-Type": "application/json", EVENT_ID_HEADER: event.id,
                   **signature_headers(destination.signing, resolve(destination.secret), event.id, timestamp, body)}
        return Request(resolve(destination.url), body, headers, f"webhook {destination.name}", private)
    if isinstance(destination, SlackDestination):
        return Request(resolve(destination.url), _json(slack_message(event)),
                       {"Content-Type": "application/json", EVENT_ID_HEADER: event.id}, f"slack {destination.name}",
                       private)
    token = resolve(destination.bot_token)
    payload = {"chat_id": destination.chat_id, "text": telegram_text(event), "parse_mode": "HTML",
               "disable_web_page_preview": True}
    return Request(f"{destination.api_url.rstrip('/')}/bot{token}/sendMessage", _json(payload),
                   {"Content-Type": "application/json"}, f"telegram {destination.name}", private)


def _expanded(destination: WebhookDestination) -> dict[str, str]:
    """The webhook's headers with every ``${ENV}`` replaced now; a variable unset or empty is an error."""
    expanded = expand_header_values(destination.headers)
    unusable = [*expanded.missing, *expanded.empty]
    if unusable:
        header, variable = unusable[0]
        raise DestinationError(f"environment variable {variable} (header {header!r} of destination "
                               f"{destination.name}) is not set or empty: export it where dagster-daemon and "
                               "the run workers run")
    return expanded.headers


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(event: OutgoingEvent) -> dict[str, Any]:
    """Slack's incoming-webhook payload: ``text`` (notifications, fallback) plus a readable mrkdwn block."""
    title = f"{event.contract}/{event.target}"
    heading = f"*<{event.link}|{_slack_escape(title)}>*" if event.link else f"*{_slack_escape(title)}*"
    lines = [f"{heading}: {_slack_escape(event.summary)}"]
    lines += [f"• {_slack_escape(r)}" for r in event.reasons]
    if event.record:
        lines.append(" ".join(f"`{_slack_escape(k)}`: {_slack_escape(str(v))}" for k, v in event.record.items()))
    return {"text": f"{title}: {event.summary}",
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}]}


def telegram_text(event: OutgoingEvent) -> str:
    """The message in Telegram's HTML parse mode (only <b>, <i>, <a>, <code> tags; the rest escaped)."""
    lines = [f"<b>{html.escape(event.contract)}/{html.escape(event.target)}</b>: {html.escape(event.summary)}"]
    lines += [f"• {html.escape(r)}" for r in event.reasons]
    lines += [f"<code>{html.escape(k)}</code>: {html.escape(str(v))}" for k, v in event.record.items()]
    if event.link:
        lines.append(f'<a href="{html.escape(event.link, quote=True)}">open in Dagster</a>')
    return "\n".join(lines)
