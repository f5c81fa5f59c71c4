"""Idempotency keys of launches: the same key and request give the same runs, another request gets 409.

A key is scoped to its contract and kept after its runs finish. It is claimed, with the request's hash and
the ids of the runs it will launch, *before* anything is launched: the table's primary key lets one request
claim it, and another request with the key is answered from that claim (the same runs, or 409 for another
body) without launching anything. The runs' ids are derived from the key too (``launch.idempotent_run_id``),
so a crash between claiming and launching is repaired by asking again: the missing runs are launched then.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
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

    def claim(self, contract: str, key: str, sha256: str, run_ids: list[str], token_id: str,
              then: Callable[[Connection], None] | None = None) -> KeyUse | None:
        """Claim the key for this request and its runs; None when this request claimed it, else the claim
        another request made first (its hash and runs). ``then`` writes in the same transaction (the audit row)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(api_idempotency.insert().values(
                    contract=contract, key=key, request_sha256=sha256, run_ids=run_ids, token_id=token_id,
                    created_at=dt.datetime.now(dt.timezone.utc)))
                if then is not None:
                    then(conn)
        except IntegrityError:
            found = self.find(contract, key)
            if found is not None:
                return found
            raise
        return None
