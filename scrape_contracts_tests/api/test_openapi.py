"""The OpenAPI document: the checked-in copy is what the API serves, and no request it allows gets a 5xx."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from scrape_contracts_tests.api.servers import BIN, REPO, ApiServer, new_token

CHECKED_IN = REPO / "scrape_contracts" / "api" / "openapi.json"


def test_checked_in_openapi_is_the_apps() -> None:
    from scrape_contracts.api.rest import create_app

    assert json.loads(CHECKED_IN.read_text()) == create_app().openapi(), (
        "openapi.json is out of date: regenerate it with `python -m scrape_contracts.api.rest`")


@pytest.mark.slow
def test_property_based_requests_find_no_server_error(demo_home: Path) -> None:
    """schemathesis generates requests from the served document (valid and invalid), bounded in examples and time."""
    token = new_token("data-team@example.com", "write")
    with ApiServer(demo_home) as api:
        served = httpx.get(f"{api.url}/openapi.json").json()
        assert served == json.loads(CHECKED_IN.read_text())
        done = subprocess.run(
            [str(BIN / "st"), "run", f"{api.url}/openapi.json", "--checks", "not_a_server_error",
             "--header", f"Authorization: Bearer {token}", "--max-examples", "15", "--max-time", "40",
             "--seed", "13", "--request-timeout", "20", "--workers", "1",
             # an open stream never ends by itself: its route is tested in test_sse.py
             "--exclude-path", "/events/stream"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"}, cwd=demo_home)
        log = api.log.read_text()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "internal error" not in log and token not in log and token not in done.stdout
