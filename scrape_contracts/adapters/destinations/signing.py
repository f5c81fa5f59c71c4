"""Webhook signatures: HMAC-SHA256 over ``timestamp.body``, sent as ``sha256=<hex>``.

A receiver recomputes the signature with the shared secret and compares in constant time, and refuses a
timestamp older than a few minutes, so a captured request cannot be replayed later. ``verify`` is what a
Python receiver calls; the README shows it in a receiver that a test runs.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

EVENT_ID_HEADER = "X-Scrape-Contracts-Event-Id"
TIMESTAMP_HEADER = "X-Scrape-Contracts-Timestamp"
SIGNATURE_HEADER = "X-Scrape-Contracts-Signature"


class SignatureError(ValueError):
    """The request is not signed by the shared secret, or too old to trust."""


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
