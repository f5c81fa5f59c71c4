"""Reconcile and dead letters through the front door: ``scrape-contracts serve`` over real HTTP, the MCP
server over stdio, a real dagster-daemon starting the runs they queue, and the stand-in provider (a stand-in
for a hosted scraping API, which cannot run here) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import anyio
import dagster as dg
import pytest
import sqlalchemy as sa
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from scrape_contracts_tests.api.servers import BIN, REPO, ApiServer, new_token
from scrape_contracts_tests.conftest import product_page, stop_daemon
from scrape_contracts_tests.defs.provider_setup import TOKEN, ProviderSetup, provider_setup  # noqa: F401
from scrape_contracts_tests.fixture_site import Response

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
OWNER = "team:data"


def _finished(run_ids: list[str], timeout: float = 600) -> dict[str, dg.DagsterRun]:
    deadline = time.monotonic() + timeout
    with dg.DagsterInstance.get() as instance:
        while True:
            runs = {r.run_id: r for r in instance.get_runs(dg.RunsFilter(run_ids=run_ids))}
            if len(runs) == len(run_ids) and all(r.is_finished for r in runs.values()):
                return runs
            assert time.monotonic() < deadline, {k: r.status for k, r in runs.items()}
            time.sleep(0.5)


def _mcp_reconcile(token: str, contracts_dir: str, arguments: dict[str, Any]) -> Any:
    params = StdioServerParameters(command=str(BIN / "scrape-contracts"),
                                   args=["--contracts-dir", contracts_dir, "mcp"],
                                   env={**os.environ, "SCRAPE_CONTRACTS_TOKEN": token})

    async def call() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            assert {"reconcile", "list_failures", "replay_failures"} <= tools
            result = await session.call_tool("reconcile", arguments)
            assert not result.is_error, result.content
            answer = result.structured_content or json.loads(result.content[0].text)
            # the server hands the scrape run to Dagster's queue after answering: the session stays open till
            # then
            run_id = answer["scrape"]["run_id"]
            deadline = time.monotonic() + 300
            with dg.DagsterInstance.get() as instance:
                queued = dg.RunsFilter(run_ids=[run_id], statuses=[dg.DagsterRunStatus.QUEUED])
                while not instance.get_runs(queued):
                    assert time.monotonic() < deadline, f"run {run_id} was not queued"
                    await anyio.sleep(0.2)
            return answer

    return anyio.run(call)


def test_reconcile_and_dead_letters_through_the_api_and_mcp(provider_setup: ProviderSetup) -> None:
    setup, provider, store = provider_setup, provider_setup.provider, provider_setup.store
    (setup.home / "dagster.yaml").write_text(json.dumps({  # runs the API queues wait for the daemon
        "telemetry": {"enabled": False}, "run_coordinator": {
            "module": "dagster", "class": "QueuedRunCoordinator",
            "config": {"dequeue_interval_seconds": 1}}}))
    for i in (1, 2, 3):
        setup.site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${i}.00"))
    setup.write("shop", {f"p{i}": setup.site.url(f"/p/{i}") for i in (1, 2, 3)})
    provider.lose_submits = 2  # p1 and p2: the provider makes each job, the answer is lost
    for key in ("p1", "p2"):
        assert not setup.run_single("shop", key).success
    jobs = {s["url"].rsplit("/", 1)[-1]: s["job_id"] for s in provider.submits()}
    assert sorted(jobs) == ["1", "2"]
    # p3 fails two runs in a row at the site: a dead letter of --last 2
    setup.site.set_handler("/p/3", lambda _request: Response(503, b"down"))
    for _ in range(2):
        assert not setup.run_single("shop", "p3").success
    write, read = new_token(OWNER, "write"), new_token(OWNER, "read")

    daemon = None
    with ApiServer(setup.home, setup.contracts_dir) as api, api.client(write) as client:
        url = "/contracts/shop/targets/p1/reconcile"
        body = {"job_id": jobs["1"], "reason": "in the provider's dashboard"}
        with api.client(read) as reader:
            assert reader.post(url, json=body, headers={"Idempotency-Key": "r1"}).status_code == 403
        assert client.post(url, json={"reason": "x"}, headers={"Idempotency-Key": "r0"}).status_code == 400
        assert client.post(url, json=body).status_code == 422  # no Idempotency-Key
        wrong = client.post(url, json={"job_id": "job-404"}, headers={"Idempotency-Key": "r0"})
        assert wrong.status_code == 409 and "the provider knows no job 'job-404'" in wrong.json()["detail"]
        first = client.post(url, json=body, headers={"Idempotency-Key": "r1"})
        assert first.status_code == 202, first.text
        answer = first.json()
        assert (answer["action"], answer["job_id"], answer["replayed"]) == ("adopted", jobs["1"], False)
        again = client.post(url, json=body, headers={"Idempotency-Key": "r1"}).json()
        assert again["replayed"] and again["scrape"]["run_id"] == answer["scrape"]["run_id"]
        other = client.post(url, json={"resubmit": True}, headers={"Idempotency-Key": "r1"})
        assert other.status_code == 409 and "r1" in other.json()["detail"]
        assert not store.state("shop", "p1").paused
        [adopted] = [j for j in store.provider_jobs("shop", "p1") if j.job_id == jobs["1"]]
        assert adopted.note.startswith(f"adopted job {jobs['1']} by {OWNER} (token ")  # who: the token's id
        assert adopted.note.endswith(": in the provider's dashboard")

        # the same operation for an agent
        by_agent = _mcp_reconcile(write, str(setup.contracts_dir), {
            "contract": "shop", "partition": "p2", "job_id": jobs["2"], "idempotency_key": "agent-1",
            "reason": "found it"})
        assert by_agent["action"] == "adopted" and not store.state("shop", "p2").paused

        failures = client.get("/contracts/shop/failures", params={"last": 2}).json()
        assert failures["targets"] == 1
        [group] = failures["groups"]
        assert group["kind"] == "fetch" and group["reason"].startswith("GET <url> failed: HTTP 503")
        assert [t["key"] for t in group["targets"]] == ["p3"]

        # a real daemon starts the queued runs: each adopted job is polled, its page checked and accepted
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                                  env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            scrapes = _finished([answer["scrape"]["run_id"], by_agent["scrape"]["run_id"]])
            assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in scrapes.values())
            titles = [store.latest_accepted("shop", k).record["title"] for k in ("p1", "p2")]
            assert titles == ["Book 1", "Book 2"]
            assert len(provider.submits()) == 4  # p1, p2 and p3's two: no job was submitted twice

            setup.site.set_page("/p/3", product_page("Book 3", "BK-3", "$3.00"))  # fixed
            replay = client.post("/contracts/shop/failures/replay", json={"last": 2},
                                 headers={"Idempotency-Key": "replay-1"})
            assert replay.status_code == 202, replay.text
            [run] = replay.json()["runs"]
            again = client.post("/contracts/shop/failures/replay", json={"last": 2},
                                headers={"Idempotency-Key": "replay-1"}).json()
            assert again["runs"][0]["run_id"] == run["run_id"]
            assert _finished([run["run_id"]])[run["run_id"]].status == dg.DagsterRunStatus.SUCCESS
        finally:
            stop_daemon(daemon)
        assert client.get("/contracts/shop/failures", params={"last": 2}).json() == {
            "contract": "shop", "last": 2, "targets": 0, "groups": []}
        assert store.latest_accepted("shop", "p3").record["title"] == "Book 3"
        drained = client.post("/contracts/shop/failures/replay", headers={"Idempotency-Key": "replay-2"})
        assert drained.status_code == 409 and "nothing to replay" in drained.json()["detail"]

    with store.engine.connect() as conn:
        audit = conn.execute(sa.text("SELECT action, target, outcome FROM sc_api_audit ORDER BY id")).all()
    assert [(a.action, a.target) for a in audit] == [("reconcile", "p1"), ("reconcile", "p1"),
                                                     ("reconcile", "p2"), ("replay_failures", "p3")]
    assert "refused" in audit[0].outcome or "knows no job" in audit[0].outcome
    assert TOKEN not in api.log.read_text()
