"""API tokens: created once and shown once, stored as sha256 hashes, resolved to a principal, revoked.

A token is ``sct_<id>_<secret>``: the id names it in lists, audits and revocations (it is not a secret);
the secret is 256 random bits, so a fast hash is as good as a slow one and a lookup is one indexed query.
Nothing here logs a token or puts one in an error message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrape_contracts.adapters.schema import api_tokens
from scrape_contracts.adapters.statuses import TokenScope

PREFIX = "sct_"


class TokenError(ValueError):
    """A token operation the user can fix (bad owner, unknown id); the message never contains a token."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: resolved from its token on every request."""

    token_id: str
    owner: str
    scope: TokenScope

    @property
    def can_write(self) -> bool:
        return self.scope == TokenScope.WRITE

    @property
    def name(self) -> str:
        """How the principal is recorded as a reviewer or pauser: the owner and the token's id."""
        return f"{self.owner} (token {self.token_id})"


@dataclass(frozen=True)
class TokenInfo:
    id: str
    owner: str
    scope: TokenScope
    label: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


def normal_owner(owner: str) -> str:
    """Owners as Dagster spells them (``team:x`` or an e-mail address): ``x`` and ``team:x`` are one owner."""
    owner = owner.strip()
    return owner if "@" in owner or owner.startswith("team:") else f"team:{owner}"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class TokenStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, owner: str, scope: TokenScope | str, label: str = "") -> tuple[TokenInfo, str]:
        """A new token: its info and the token itself (the only time it exists outside its holder)."""
        if not owner.strip() or owner.strip() in ("team:",):
            raise TokenError("a token needs an owner (--owner team:NAME or an e-mail address)")
        try:
            scope = TokenScope(scope)
        except ValueError:
            raise TokenError(f"scope must be 'read' or 'write', not {scope!r}") from None
        token_id = secrets.token_hex(6)
        token = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        info = TokenInfo(token_id, normal_owner(owner), scope, label.strip(), _now(), None)
        with self.engine.begin() as conn:
            conn.execute(api_tokens.insert().values(
                id=info.id, token_sha256=_hash(token), owner=info.owner, scope=info.scope, label=info.label,
                created_at=info.created_at))
        return info, token

    def list(self) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(api_tokens).order_by(api_tokens.c.created_at)).all()
        return [TokenInfo(r.id, r.owner, r.scope, r.label, r.created_at, r.revoked_at) for r in rows]

    def revoke(self, id_or_token: str) -> TokenInfo:
        """Revoke by id or by the token itself; refused requests start with the next one."""
        text = id_or_token.strip()
        where = api_tokens.c.token_sha256 == _hash(text) if text.startswith(PREFIX) else api_tokens.c.id == text
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(api_tokens).where(where)).first()
            if row is None:
                shown = "that token" if text.startswith(PREFIX) else f"id {text!r}"
                raise TokenError(f"no token with {shown}; see `scrape-contracts tokens list`")
            revoked = row.revoked_at or _now()
            conn.execute(api_tokens.update().where(api_tokens.c.id == row.id).values(revoked_at=revoked))
        return TokenInfo(row.id, row.owner, row.scope, row.label, row.created_at, revoked)

    def resolve(self, token: str) -> Principal | None:
        """The principal of a valid, unrevoked token; None for anything else (unknown, revoked, malformed)."""
        if not token.startswith(PREFIX):
            return None
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_tokens.c.id, api_tokens.c.owner, api_tokens.c.scope,
                                         api_tokens.c.revoked_at)
                               .where(api_tokens.c.token_sha256 == _hash(token))).first()
        if row is None or row.revoked_at is not None:
            return None
        return Principal(row.id, row.owner, TokenScope(row.scope))

    def resolve_many(self, tokens: set[str]) -> dict[str, Principal | None]:
        """``resolve`` for many tokens in one query (the event hub checks every open stream's at each poll)."""
        hashes = {_hash(t): t for t in tokens if t.startswith(PREFIX)}
        found: dict[str, Principal | None] = dict.fromkeys(tokens)
        if not hashes:
            return found
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(api_tokens.c.token_sha256, api_tokens.c.id, api_tokens.c.owner,
                                          api_tokens.c.scope, api_tokens.c.revoked_at)
                                .where(api_tokens.c.token_sha256.in_(list(hashes)))).all()
        for row in rows:
            if row.revoked_at is None:
                found[hashes[row.token_sha256]] = Principal(row.id, row.owner, TokenScope(row.scope))
        return found
