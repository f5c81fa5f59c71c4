"""Webhook signatures, in two schemes (a destination's ``signing:``).

``scrape-contracts`` (the default): HMAC-SHA256 over ``timestamp.body``, sent as ``sha256=<hex>`` in
``X-Scrape-Contracts-Signature``. A receiver recomputes the signature with the shared secret and compares in
constant time, and refuses a timestamp older than a few minutes, so a captured request cannot be replayed
later. ``verify`` is what a Python receiver calls; docs/webhook-verification.md shows a receiver doing the
same without this package, which a test runs.

``standard-webhooks``: the Standard Webhooks specification, which receivers verify with its libraries
(every language has one): ``webhook-id`` (the message id: the same on every retry and replay, what a
receiver deduplicates on), ``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 over
id.timestamp.body>``, keyed by the secret's bytes (``whsec_<base64>``). Signed here with the standard library
rather than the ``standardwebhooks`` package: it is a dozen lines and adds no dependency to every run worker,
and the tests verify these requests with that package, an implementation that is not ours.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

from scrape_contracts.contract.destinations import DestinationError, Signing

EVENT_ID_HEADER = "X-Scrape-Contracts-Event-Id"
TIMESTAMP_HEADER = "X-Scrape-Contracts-Timestamp"
SIGNATURE_HEADER = "X-Scrape-Contracts-Signature"
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
STANDARD_SECRET_PREFIX = "whsec_"


class SignatureError(ValueError):
    """The request is not signed by the shared secret, or too old to trust."""


def signature_headers(scheme: Signing, secret: str, message_id: str, timestamp: int, body: bytes
                      ) -> dict[str, str]:
    """The headers that sign ``body`` in ``scheme`` (the event id header is sent by the caller in both)."""
    if scheme is Signing.STANDARD_WEBHOOKS:
        return {STANDARD_ID_HEADER: message_id, STANDARD_TIMESTAMP_HEADER: str(timestamp),
                STANDARD_SIGNATURE_HEADER: sign_standard(secret, message_id, timestamp, body)}
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, timestamp, body)}


def standard_key(secret: str) -> bytes:
    """The key bytes of a Standard Webhooks secret (``whsec_`` then base64); ``DestinationError`` otherwise."""
    encoded = secret.removeprefix(STANDARD_SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < 24:
        raise DestinationError("a standard-webhooks secret is whsec_ followed by the base64 of 24 to 64 random "
                               "bytes (e.g. python -c \"import base64,os; print('whsec_' + "
                               "base64.b64encode(os.urandom(32)).decode())\"); the one set is not")
    return key


def sign_standard(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(standard_key(secret), f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, max_age_s: float = 300.0,
           now: float | None = None) -> str:
    """The event id of a genuine, fresh request; ``SignatureError`` otherwise."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        timestamp = int(lower[TIMESTAMP_HEADER.lower()])
        signature = lower[SIGNATURE_HEADER.lower()]
        event = lower[EVENT_ID_HEADER.lower()]
    except (KeyError, ValueError):
        raise SignatureError("missing or malformed signature headers") from None
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > max_age_s:
        raise SignatureError(f"timestamp is {age:.0f} s old (more than {max_age_s:.0f} s): possible replay")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature):
        raise SignatureError("signature does not match the body and the shared secret")
    return event
