"""How the front door says no: a ``Refusal`` kind (the API's status code, MCP's tool error), a message."""

from __future__ import annotations

from scrape_contracts.adapters.statuses import TextEnum


class Refusal(TextEnum):
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    INVALID = "invalid"
    UNAVAILABLE = "unavailable"


class Refused(Exception):
    """A request the front door will not carry out; the message says why and never contains a token."""

    def __init__(self, kind: Refusal, message: str) -> None:
        super().__init__(message)
        self.kind = kind
