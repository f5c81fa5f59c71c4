"""The MCP server as an agent sees it: the SDK's stdio client starts `scrape-contracts mcp` and calls tools."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import dagster as dg
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from scrape_contracts_tests.api.servers import BIN, REPO, new_token
from scrape_contracts_tests.conftest import stop_daemon


def _params(token: str, home: Path, token_file: Path | None = None) -> StdioServerParameters:
    # PYTHONPATH passed on: the server must import the code under test (a worktree's), not another install's
    env = {"DAGSTER_HOME": str(home), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    args = ["--contracts-dir", str(REPO / "contracts"), "mcp"]
    if token_file is None:
        env["SCRAPE_CONTRACTS_TOKEN"] = token
    else:
        args += ["--token-file", str(token_file)]
    return StdioServerParameters(command=str(BIN / "scrape-contracts"), args=args, env=env)


def _command_lines() -> list[bytes]:
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(path.read_bytes())
        except OSError:
            pass  # ended meanwhile
    return found


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content["result"] if set(content) == {"result"} else content
    return json.loads(result.content[0].text)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.slow
def test_agent_lists_contracts_launches_a_run_and_reads_its_events(demo_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    token = new_token("data-team@example.com", "write")
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(REPO / "contracts"))  # the daemon's code location

    async def session_run() -> tuple[list, str, list]:
        async with stdio_client(_params(token, demo_home)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"list_contracts", "get_accepted", "run_contract", "list_events", "review"} <= set(tools)
            assert all(len(t.description or "") > 80 for t in tools.values())
            contracts = _data(await session.call_tool("list_contracts", {}))
            cursor = _data(await session.call_tool("list_events", {"contract": "books", "limit": 1000}))["next"]
            launched = _data(await session.call_tool("run_contract", {
                "contract": "books", "partition": "dune", "idempotency_key": "agent-1"}))
            run_id = launched["runs"][0]["run_id"]
            again = _data(await session.call_tool("run_contract", {
                "contract": "books", "partition": "dune", "idempotency_key": "agent-1"}))
            assert again["replayed"] and again["runs"][0]["run_id"] == run_id
            # the run is queued: a real dagster-daemon starts it; the agent follows the trail
            daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                                      env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                events: list = []
                deadline = time.monotonic() + 600  # the run is queued after the answer, then started
                with dg.DagsterInstance.get() as instance:
                    while True:
                        run = instance.get_run_by_id(run_id)
                        page = _data(await session.call_tool("list_events", {"contract": "books",
                                                                             "after": cursor}))
                        events += page["events"]
                        cursor = page["next"]
                        if run is not None and run.is_finished and not page["events"]:
                            break
                        assert time.monotonic() < deadline, f"run {run_id} is {run.status if run else 'not queued yet'}"
                        await anyio.sleep(0.5)
            finally:
                stop_daemon(daemon)
            return contracts, run_id, events

    contracts, run_id, events = anyio.run(session_run)
    assert [c["name"] for c in contracts] == ["books", "reviews"]
    mine = [e for e in events if e["run_id"] == run_id]
    assert mine and {e["partition"] for e in mine} == {"dune"}
    assert mine[0]["stage"] == "fetched"


def test_read_token_cannot_launch_and_other_owners_contracts_are_refused(demo_home: Path, tmp_path: Path) -> None:
    token = new_token("data-team@example.com", "read")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)

    async def session_run() -> tuple[str, str, list]:
        async with stdio_client(_params(token, demo_home, token_file)) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # the server acts with the file's token, and no process shows it in its arguments
            assert not [line for line in _command_lines() if token.encode() in line]
            refused = await session.call_tool("run_contract", {"contract": "books", "idempotency_key": "k"})
            assert refused.is_error
            other = await session.call_tool("get_accepted", {"contract": "jobs"})
            assert other.is_error
            page = _data(await session.call_tool("get_accepted", {"contract": "books", "partition": "dune"}))
            return _text(refused), _text(other), page["items"]

    refused, other, items = anyio.run(session_run)
    assert "forbidden" in refused and "read scope" in refused and token not in refused
    assert "no valid contract named 'jobs' that data-team@example.com owns" in other
    assert [i["record"]["sku"] for i in items] == ["BK-0001"]
    with dg.DagsterInstance.get() as instance:
        assert not instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/trigger": "api"}))


def test_streamable_http_transport(demo_home: Path) -> None:
    import httpx
    import httpx2

    from mcp.client.streamable_http import streamable_http_client

    from scrape_contracts_tests.api.servers import free_port

    token = new_token("team:recruiting-analytics", "read")
    other = new_token("data-team@example.com", "read")
    port = free_port()
    # the server holds no token: each caller is who its bearer token says, checked on every request
    env = {k: v for k, v in os.environ.items() if k != "SCRAPE_CONTRACTS_TOKEN"}
    server = subprocess.Popen([str(BIN / "scrape-contracts"), "--contracts-dir", str(REPO / "contracts"), "mcp",
                               "--transport", "http", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)

        async def session_run(bearer: str) -> list:
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"})
            async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) \
                    as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return _data(await session.call_tool("list_contracts", {}))

        mine, theirs = anyio.run(session_run, token), anyio.run(session_run, other)
        # no token, or one that does not exist: refused before any tool runs, and the answer names no token
        anonymous = httpx.post(f"http://127.0.0.1:{port}/mcp", json={}, timeout=10)
        forged = httpx.post(f"http://127.0.0.1:{port}/mcp", json={}, timeout=10,
                            headers={"Authorization": "Bearer sct_nope_nope"})
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert [c["name"] for c in mine] == ["jobs"]
    assert sorted(c["name"] for c in theirs) == ["books", "reviews"]
    assert anonymous.status_code == 401 and forged.status_code == 401 and "sct_nope" not in forged.text
