"""Event metadata stays small whatever a page holds.

A field value is data from the web: one of 10 MB was copied into the extracted, violation, healing,
candidate, check and accepted events of a run (two runs grew the event log by 135 MB). The full record is
kept once, in the project store with its candidate; the event log gets a JSON copy in which every string
longer than ``SCRAPE_CONTRACTS_METADATA_MAX_CHARS`` is cut, with a note saying how long it was.
"""

from __future__ import annotations

import json
from typing import Any

from scrape_contracts import settings

_NESTING = 32  # deeper than this, a structure is summarised (metadata is for people, not for storage)


def bounded_text(text: str, max_chars: int | None = None) -> str:
    limit = max_chars or settings.metadata_max_chars()
    if len(text) <= limit:
        return text
    return (f"{text[:limit]}… [truncated: {len(text):,} characters; the full value is in the project store "
            f"(limit metadata_max_chars={limit}, setting SCRAPE_CONTRACTS_METADATA_MAX_CHARS)]")


def bounded(value: Any, max_chars: int | None = None) -> Any:
    """A JSON-able copy of ``value`` with long strings cut (``default=str`` for dates, decimals, ...)."""
    limit = max_chars or settings.metadata_max_chars()
    return _bound(json.loads(json.dumps(value, default=str)), limit, 0)


def _bound(value: Any, limit: int, depth: int) -> Any:
    if isinstance(value, str):
        return bounded_text(value, limit)
    if depth >= _NESTING and isinstance(value, (dict, list)):
        return bounded_text(json.dumps(value), limit)
    if isinstance(value, dict):
        return {bounded_text(str(k), limit): _bound(v, limit, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_bound(v, limit, depth + 1) for v in value]
    return value
