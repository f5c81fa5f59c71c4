"""Hostile requests to the REST API (issue 28): each refused at its root, on SQLite and PostgreSQL where the
finding depended on the backend. The API is the real app on a real uvicorn server on 127.0.0.1 (in a thread
of the test, so a PostgreSQL front door needs no process of its own)."""

from __future__ import annotations

import json
import threading
import time

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa

from scrape_contracts.api import FrontDoor, Refusal, Refused
from scrape_contracts.api import models as m
from scrape_contracts.api.rest import create_app
from scrape_contracts.cli import main
from scrape_contracts_tests.api.servers import ThreadedApi, free_port, oversized_posts
from scrape_contracts_tests.conftest import Harness

CONTRACT = """
name: {name}
owners: [{owner}]
targets:
{targets}
fetch:
  adapter: http
  allow_private_addresses: {private}
fields:
  title:
    selector: "#title"
"""
STATIC = "  - url: https://shop.example/{name}/1\n    key: p1"


def _door(harness: Harness) -> FrontDoor:
    for name, owner, targets, private in (("alpha", "team:shop", STATIC, "false"),
                                          ("other", "team:other", STATIC, "false"),
                                          ("dyn", "team:shop", "  dynamic: true", "false"),
                                          ("intranet", "team:shop", "  dynamic: true", "true")):
        harness.write(f"{name}.yaml", CONTRACT.format(name=name, owner=owner, private=private,
                                                      targets=targets.format(name=name)))
    return FrontDoor(contracts_dir=harness.contracts_dir, db_url=harness.backend.db_url, instance=harness.instance)


def _token(door: FrontDoor, owner: str = "shop", scope: str = "write") -> str:
    return door.tokens.create(owner, scope)[1]


def _audit(door: FrontDoor) -> list[tuple[str, str, str]]:
    return [(e.action, e.target, e.reason) for e in door.audit.entries()]


def test_another_owners_contract_answers_as_a_missing_one(sqlite_harness: Harness) -> None:
    door = _door(sqlite_harness)
    with ThreadedApi(create_app(front_door=door)) as api, api.client(_token(door)) as client:
        for path in ("/contracts/{}", "/contracts/{}/accepted", "/events?contract={}",
                     "/contracts/{}/targets/p1/resume"):
            method = "POST" if path.endswith("resume") else "GET"
            theirs = client.request(method, path.format("other"))
            missing = client.request(method, path.format("nothere"))
            assert theirs.status_code == missing.status_code == 404, (path, theirs.text)
            assert theirs.json() == json.loads(missing.text.replace("nothere", "other")), path
            assert "team:other" not in theirs.text
        with client.stream("GET", "/events/stream", params={"contract": "other"}) as stream:
            assert stream.status_code == 404


def test_validation_errors_are_short_and_quote_no_input(sqlite_harness: Harness) -> None:
    door = _door(sqlite_harness)
    with ThreadedApi(create_app(front_door=door)) as api, api.client(_token(door)) as client:
        huge_url = "https://shop.example/" + "a" * 1_000_000
        huge_key = "k" * 100_000
        for response in (
                client.post("/contracts/dyn/targets", json={"urls": [huge_url]}),
                client.post("/contracts/dyn/targets", json={"urls": ["https://shop.example/1"], huge_key: 1}),
                client.post("/contracts/alpha/runs", json={"partition": "p" * 10_000},
                            headers={"Idempotency-Key": "long"}),
                client.post("/contracts/alpha/targets/p1/pause", content=b"{not json" + b"x" * 10_000,
                            headers={"Content-Type": "application/json"}),
                # a lone surrogate: valid JSON, not valid Unicode (the default handler answered 500)
                client.post("/contracts/alpha/targets/p1/pause", content=b'{"reason": "\\ud800 gone"}',
                            headers={"Content-Type": "application/json"})):
            assert response.status_code == 422, response.text[:300]
            assert len(response.content) < 300, response.text[:300]
            assert set(response.json()) == {"detail"} and "aaaaaaaaaa" not in response.text
        assert client.post("/contracts/dyn/targets", json={"urls": ["https://shop.example/" + "b" * 3000]}
                           ).status_code == 422  # URLs: at most 2048 characters
    assert door.store.list_targets("dyn") == {}


# (method, path, body, headers): each carries a control character in one text field
CONTROL = [
    ("POST", "/contracts/alpha/targets/p1/pause", {"reason": "supplier\x00 outage"}, {}),
    ("POST", "/contracts/alpha/targets/p1/pause", {"reason": "\x1b[2J\x1b[31mgone"}, {}),
    ("POST", "/contracts/alpha/targets/p1/resume", {"reason": "back\x00"}, {}),
    ("POST", "/reviews/alpha/p1", {"decision": "accept", "reason": "fine\x00"}, {}),
    ("POST", "/contracts/alpha/runs", {"partition": "p\x001"}, {"Idempotency-Key": "k1"}),
    ("POST", "/contracts/dyn/targets", {"urls": ["https://shop.example/\x00"]}, {}),
    ("POST", "/contracts/alpha/targets/p%001/pause", {"reason": "x"}, {}),
    ("GET", "/events?contract=al%00pha", None, {}),
    ("GET", "/contracts/alpha/accepted?partition=p%1b1", None, {}),
]


def test_control_characters_are_refused_in_every_text_field(harness: Harness) -> None:
    """PostgreSQL answered a resume whose reason held a NUL with 500, after the target had been resumed."""
    door = _door(harness)
    with ThreadedApi(create_app(front_door=door)) as api, api.client(_token(door)) as client:
        assert client.post("/contracts/alpha/targets/p1/pause", json={"reason": "maintenance"}).status_code == 200
        before = _audit(door)
        for method, path, body, headers in CONTROL:
            response = client.request(method, path, json=body, headers=headers)
            assert response.status_code == 422, (path, body, response.text)
            assert "control characters are not allowed" in response.json()["detail"], response.text
        assert door.store.state("alpha", "p1").paused  # the refused resume changed nothing
        assert door.store.state("alpha", "p1").pause_reason.endswith("maintenance")
        assert _audit(door) == before == [("pause", "p1", "maintenance")]
        assert door.store.list_targets("dyn") == {}


def _break_audit_inserts(db_url: str) -> None:
    """A real fault in the database: every insert into the audit table fails (as a full disk would)."""
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        if db_url.startswith("sqlite"):
            conn.execute(sa.text("CREATE TRIGGER audit_down BEFORE INSERT ON sc_api_audit "
                                 "BEGIN SELECT RAISE(ABORT, 'audit storage down'); END"))
        else:
            conn.execute(sa.text("CREATE FUNCTION audit_down() RETURNS trigger AS $$ BEGIN "
                                 "RAISE EXCEPTION 'audit storage down'; END $$ LANGUAGE plpgsql"))
            conn.execute(sa.text("CREATE TRIGGER audit_down BEFORE INSERT ON sc_api_audit "
                                 "FOR EACH ROW EXECUTE FUNCTION audit_down()"))
    engine.dispose()


def test_a_change_that_cannot_be_audited_is_not_made(harness: Harness) -> None:
    door = _door(harness)
    who = door.authenticate(_token(door))
    door.set_paused(who, "alpha", "p1", paused=True, reason="maintenance", request_id="r1")
    _break_audit_inserts(harness.backend.db_url)
    with pytest.raises(Refused) as refused:
        door.set_paused(who, "alpha", "p1", paused=False, reason="", request_id="r2")
    assert refused.value.kind == Refusal.UNAVAILABLE and "nothing was changed" in str(refused.value)
    assert door.store.state("alpha", "p1").paused
    with pytest.raises(Refused):
        door.review(who, "alpha", "p1", m.ReviewBody(decision="accept", reason="fine"), "r3")
    runs = harness.instance.get_runs()
    assert len(runs) == 1  # the first pause's; the refused changes started no job


def test_concurrent_launches_with_one_key_and_two_bodies_launch_once(harness: Harness,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is claimed before launching: the request that loses the claim gets 409 and launches nothing."""
    door = _door(harness)
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))  # what `dagster job launch` loads
    who = door.authenticate(_token(door))
    bodies = [m.RunRequestBody(partition="p1"), m.RunRequestBody()]  # one target; every target, batched
    start = threading.Barrier(2)
    results: list[object] = [None, None]

    def launch(i: int) -> None:
        start.wait()
        try:
            results[i] = door.run_contract(who, "alpha", bodies[i], "nightly-1", f"r{i}")
        except Refused as exc:
            results[i] = exc

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    refused = [r for r in results if isinstance(r, Refused)]
    launched = [r for r in results if isinstance(r, m.RunLaunch)]
    assert len(refused) == 1 and len(launched) == 1, results
    assert refused[0].kind == Refusal.CONFLICT and "nightly-1" in str(refused[0])
    door.settle(timeout=600)  # the runs are handed to Dagster's queue after the answer
    runs = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "nightly-1"}))
    assert sorted(r.run_id for r in runs) == sorted(r.run_id for r in launched[0].runs)
    winner = bodies[results.index(launched[0])]
    again = door.run_contract(who, "alpha", winner, "nightly-1", "r3")
    assert again.replayed and [r.run_id for r in again.runs] == [r.run_id for r in launched[0].runs]
    assert [a[0] for a in _audit(door)] == ["run"]


def test_body_larger_than_the_limit_is_refused_before_it_is_read(sqlite_harness: Harness) -> None:
    """Without a token too: the limit comes before authentication, and the body is never held."""
    door = _door(sqlite_harness)
    limit = 64 * 1024
    with ThreadedApi(create_app(front_door=door, max_body_bytes=limit)) as api:
        # declared: refused at once, although not one byte of the 100 MB follows; chunked (no length): the
        # server stops reading at the limit and answers, the client cannot send it all
        declared, chunked, sent = oversized_posts(api.port, "/contracts/dyn/targets")
        assert declared.startswith(b"HTTP/1.1 413 "), declared[:200]
        assert chunked.startswith(b"HTTP/1.1 413 "), chunked[:200]
        assert sent < 16 * 1024 * 1024, sent  # socket buffers, not the body
        assert httpx.get(f"{api.url}/health/live").status_code == 200


def test_mcp_http_body_larger_than_the_limit_is_refused_before_it_is_read(sqlite_harness: Harness) -> None:
    """The MCP server's streamable HTTP transport as `mcp --transport http` serves it: the body limit comes
    before the Host check and the bearer token's, and the body is never held."""
    from scrape_contracts.api.mcp import build_server, http_app, transport_security

    door = _door(sqlite_harness)
    port, limit = free_port(), 64 * 1024
    server = build_server(None, front_door=door, http_url=f"http://127.0.0.1:{port}")
    app = http_app(server, transport_security("127.0.0.1", port), max_body_bytes=limit)
    with ThreadedApi(app, port) as mcp:
        declared, chunked, sent = oversized_posts(port, "/mcp")
        assert declared.startswith(b"HTTP/1.1 413 "), declared[:200]
        assert b"SCRAPE_CONTRACTS_API_MAX_BODY_BYTES" in declared
        assert chunked.startswith(b"HTTP/1.1 413 "), chunked[:200]
        assert sent < 16 * 1024 * 1024, sent
        # 100 KB of headers: 400 from the parser when they arrive in pieces, 431 when whole
        padded = httpx.post(f"{mcp.url}/mcp", headers={"X-Padding": "a" * 100_000}, timeout=20)
        assert padded.status_code in (400, 431)
        # under the limit, the request goes on to the token check
        small = httpx.post(f"{mcp.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=20,
                           headers={"Accept": "application/json, text/event-stream"})
        assert small.status_code == 401, small.text
        with httpx.Client(base_url=mcp.url, timeout=20) as client:
            answer = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                 headers={"Accept": "application/json, text/event-stream",
                                          "Authorization": f"Bearer {_token(door, scope='read')}"})
        assert answer.status_code != 413, answer.text


def test_literal_private_addresses_are_refused_when_targets_are_added(sqlite_harness: Harness, capsys) -> None:
    door = _door(sqlite_harness)
    with ThreadedApi(create_app(front_door=door)) as api, api.client(_token(door)) as client:
        for url, says in (("http://169.254.169.254/latest/meta-data/", "a cloud metadata address"),
                          ("http://10.1.2.3/admin", "a private address"),
                          ("http://[::ffff:127.0.0.1]:8080/", "a loopback address"),
                          ("http://2130706433/", "127.0.0.1 is a loopback address")):
            refused = client.post("/contracts/dyn/targets", json={"urls": [url]})
            assert refused.status_code == 400 and says in refused.json()["detail"], refused.text
        # a contract that allows private addresses may add them; a metadata address never
        assert client.post("/contracts/intranet/targets", json={"urls": ["http://10.1.2.3/admin"]}).status_code == 201
        assert client.post("/contracts/intranet/targets",
                           json={"urls": ["http://169.254.169.254/"]}).status_code == 400
    assert door.store.list_targets("dyn") == {}
    code = main(["--contracts-dir", str(sqlite_harness.contracts_dir), "targets", "add", "dyn",
                 "http://192.168.0.10/x"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "192.168.0.10 is a private address" in err
    assert door.store.list_targets("dyn") == {}


def test_liveness_answers_while_every_worker_thread_waits_on_the_database(sqlite_harness: Harness) -> None:
    """The red-team's 200 streams on PostgreSQL held the worker threads and /health/live, a synchronous route,
    queued behind them (p50 4.9 s). Here every worker thread waits on the store's write lock, held by the
    test: liveness still answers, from the event loop."""
    import asyncio
    import sqlite3
    from concurrent.futures import ThreadPoolExecutor

    import anyio.to_thread

    door = _door(sqlite_harness)
    token = _token(door)
    with ThreadedApi(create_app(front_door=door)) as api, ThreadPoolExecutor(60) as callers:
        loop = api.server.servers[0].get_loop()

        async def threads_in_use() -> tuple[float, float]:
            limiter = anyio.to_thread.current_default_thread_limiter()
            return limiter.borrowed_tokens, limiter.total_tokens

        path = sa.engine.make_url(sqlite_harness.backend.db_url).database
        lock = sqlite3.connect(path, isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")  # every store transaction takes it first (engines.py): all wait
            calls = [callers.submit(httpx.get, f"{api.url}/contracts", timeout=120,
                                    headers={"Authorization": f"Bearer {token}"}) for _ in range(60)]
            deadline = time.monotonic() + 60
            while True:  # until the app's worker threads are all taken by requests waiting on the lock
                used, total = asyncio.run_coroutine_threadsafe(threads_in_use(), loop).result(timeout=30)
                if used >= total:
                    break
                assert time.monotonic() < deadline, f"only {used} of {total} worker threads in use"
                time.sleep(0.05)
            # a synchronous route would queue here until the lock is released (never, within the timeout)
            assert httpx.get(f"{api.url}/health/live", timeout=10).json() == {"status": "ok"}
            assert not any(call.done() for call in calls)  # they were all still waiting meanwhile
        finally:
            lock.rollback()
            lock.close()
        assert {call.result().status_code for call in calls} == {200}
