"""Where outgoing events go: a generic signed webhook, Slack and Telegram, declared in ``destinations.yaml``.

``contract/destinations.py`` reads the declarations (secrets only as ``${ENV}``; the contracts' loader
checks every name they notify against them), ``messages`` turns an event into the HTTP
request each destination expects, ``signing`` signs and verifies webhook bodies, and ``delivery`` sends one
request with the retry policy (at most 3 attempts of one deadline each, 2/4/8 s backoff honouring
``Retry-After``, retries on 429, 5xx and connection errors only) through the fetch's address guard. Nothing here knows Dagster or the store.
"""

from scrape_contracts.contract.destinations import (
    DestinationError, Destinations, SlackDestination, TelegramDestination, WebhookDestination, load_destinations,
)
from scrape_contracts.adapters.destinations.delivery import (
    Attempt, DeliveryClient, DeliveryPolicy, DeliveryResult, DeliveryStatus, deliver,
)
from scrape_contracts.adapters.destinations.messages import OutgoingEvent, Request, event_id, request_for
from scrape_contracts.adapters.destinations.signing import SignatureError, sign, verify

__all__ = [
    "Attempt", "DeliveryClient", "DeliveryPolicy", "DeliveryResult", "DeliveryStatus", "DestinationError", "Destinations",
    "OutgoingEvent", "Request", "SignatureError", "SlackDestination", "TelegramDestination", "WebhookDestination",
    "deliver", "event_id", "load_destinations", "request_for", "sign", "verify",
]
