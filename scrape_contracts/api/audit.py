"""The audit trail of the front door: every write, who made it, on what, why, in which request.

An entry is written before the change it records is made, or in the same transaction: a change that cannot
be audited is not made.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from scrape_contracts.adapters.schema import api_audit
from scrape_contracts.api.tokens import Principal


@dataclass(frozen=True)
class AuditEntry:
    token_id: str
    owner: str
    action: str
    contract: str
    target: str
    reason: str
    request_id: str
    outcome: str
    created_at: dt.datetime


class AuditTrail:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, principal: Principal, action: str, contract: str, target: str, reason: str,
               request_id: str, outcome: str, conn: Connection | None = None) -> int:
        """Write an entry (in ``conn``'s transaction when given, so it commits with the change it records);
        returns its id, for ``finish``."""
        values = dict(token_id=principal.token_id, owner=principal.owner, action=action, contract=contract,
                      target=target, reason=reason, request_id=request_id, outcome=outcome[:2000],
                      created_at=dt.datetime.now(dt.timezone.utc))
        if conn is not None:
            return int(conn.execute(api_audit.insert().values(**values)).inserted_primary_key[0])
        with self.engine.begin() as own:
            return int(own.execute(api_audit.insert().values(**values)).inserted_primary_key[0])

    def finish(self, entry_id: int, outcome: str) -> None:
        """The outcome of a change whose entry was written before it was made."""
        with self.engine.begin() as conn:
            conn.execute(api_audit.update().where(api_audit.c.id == entry_id).values(outcome=outcome[:2000]))

    def entries(self, contract: str | None = None) -> list[AuditEntry]:
        query = sa.select(api_audit).order_by(api_audit.c.id)
        if contract is not None:
            query = query.where(api_audit.c.contract == contract)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [AuditEntry(r.token_id, r.owner, r.action, r.contract, r.target, r.reason, r.request_id,
                           r.outcome, r.created_at) for r in rows]
