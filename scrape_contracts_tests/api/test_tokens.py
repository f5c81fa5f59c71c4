"""API tokens through the CLI: shown once, stored as hashes only, revoked by id or by the token."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from scrape_contracts.cli import main
from scrape_contracts.api.tokens import TokenStore
from scrape_contracts_tests.conftest import Backend


def _create(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    assert main(["tokens", "create", *args]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    token_id = lines[0].split()[2]
    return token_id, lines[-1]


def test_token_is_shown_once_and_only_its_hash_is_kept(backend: Backend, capsys) -> None:
    token_id, token = _create(capsys, "--owner", "data-team", "--scope", "read", "--label", "dashboards")
    assert token.startswith("sct_") and token_id in token and len(token) > 40
    assert main(["tokens", "list"]) == 0
    listed = capsys.readouterr().out
    assert token_id in listed and "team:data-team" in listed and "read" in listed and "active" in listed
    assert token not in listed and token.split("_", 2)[2] not in listed
    engine = sa.create_engine(backend.db_url)
    with engine.connect() as conn:
        rows = [tuple(map(str, r)) for r in conn.execute(sa.text("SELECT * FROM sc_api_tokens")).all()]
    engine.dispose()
    assert rows and not any(token.split("_", 2)[2] in value for row in rows for value in row)
    principal = TokenStore(sa.create_engine(backend.db_url)).resolve(token)
    assert principal is not None and principal.owner == "team:data-team" and not principal.can_write


@pytest.mark.parametrize("by", ["id", "token"])
def test_revoke_by_id_or_token(sqlite_backend: Backend, capsys, by: str) -> None:
    token_id, token = _create(capsys, "--owner", "a@example.com", "--scope", "write")
    store = TokenStore(sa.create_engine(sqlite_backend.db_url))
    assert store.resolve(token) is not None
    assert main(["tokens", "revoke", token_id if by == "id" else token]) == 0
    out = capsys.readouterr().out
    assert f"revoked token {token_id}" in out and token not in out
    assert store.resolve(token) is None
    assert "revoked" in (main(["tokens", "list"]), capsys.readouterr().out)[1]


def test_token_mistakes_are_one_line(sqlite_backend: Backend, capsys) -> None:
    assert main(["tokens", "revoke", "sct_nothere_secretsecret"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no token with that token") and "secretsecret" not in err
    assert main(["tokens", "revoke", "abc123"]) == 2
    assert "no token with id 'abc123'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tokens", "create", "--owner", "x", "--scope", "admin"])
    assert main(["tokens", "create", "--owner", "  ", "--scope", "read"]) == 2
    assert "a token needs an owner" in capsys.readouterr().err
