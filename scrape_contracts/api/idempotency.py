"""Idempotency keys of launches: the same key and request give the same runs, another request gets 409.

A key is scoped to its contract and kept after its runs finish. The runs' ids are derived from the key
too (``launch.idempotent_run_id``), so a crash between launching and recording launches nothing twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from scrape_contracts.adapters.schema import api_idempotency


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class KeyUse:
    request_sha256: str
    run_ids: list[str]


class IdempotencyKeys:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def find(self, contract: str, key: str) -> KeyUse | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_idempotency).where(api_idempotency.c.contract == contract,
                                                                api_idempotency.c.key == key)).first()
        return None if row is None else KeyUse(row.request_sha256, list(row.run_ids))

    def remember(self, contract: str, key: str, sha256: str, run_ids: list[str], token_id: str) -> KeyUse:
        """Record the key's runs; when another request recorded it first, that one wins (and is returned)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(api_idempotency.insert().values(
                    contract=contract, key=key, request_sha256=sha256, run_ids=run_ids, token_id=token_id,
                    created_at=dt.datetime.now(dt.timezone.utc)))
        except IntegrityError:
            found = self.find(contract, key)
            if found is not None:
                return found
            raise
        return KeyUse(sha256, run_ids)
