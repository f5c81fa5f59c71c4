"""The REST API as a client sees it: ``scrape-contracts serve`` on 127.0.0.1, real HTTP, the demo's instance."""

from __future__ import annotations

import time

from pathlib import Path

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa

from scrape_contracts.defs.launching import idempotent_run_id
from scrape_contracts_tests.api.servers import ApiServer, cli, new_token

BOOKS_OWNER = "data-team@example.com"  # contracts/books.yaml
JOBS_OWNER = "team:recruiting-analytics"  # contracts/jobs.yaml

# every route that needs a token, called on the books contract (bodies valid, so only auth can refuse them)
ROUTES = [
    ("GET", "/contracts", None, {}),
    ("GET", "/contracts/books", None, {}),
    ("GET", "/contracts/books/accepted", None, {}),
    ("POST", "/contracts/books/runs", {"partition": "dune"}, {"Idempotency-Key": "auth-check"}),
    ("POST", "/contracts/books/targets", {"urls": ["https://books.example.com/book/9.html"]}, {}),
    ("POST", "/contracts/books/targets/dune/pause", {"reason": "x"}, {}),
    ("POST", "/contracts/books/targets/dune/resume", {}, {}),
    ("POST", "/reviews/books/neuromancer", {"decision": "reject", "reason": "x"}, {}),
    ("POST", "/contracts/books/targets/dune/reconcile", {"resubmit": True},
     {"Idempotency-Key": "auth-check"}),
    ("GET", "/contracts/books/failures", None, {}),
    ("POST", "/contracts/books/failures/replay", {"last": 3}, {"Idempotency-Key": "auth-check"}),
    ("GET", "/events?contract=books", None, {}),
    ("GET", "/events/stream?contract=books", None, {}),
    ("GET", "/health/detailed", None, {}),
]


def _call(client: httpx.Client, method: str, path: str, body: dict | None, headers: dict) -> httpx.Response:
    return client.request(method, path, json=body, headers=headers)


@pytest.fixture
def api(demo_home: Path):
    with ApiServer(demo_home) as server:
        yield server


def test_no_token_or_a_wrong_owner_is_refused_everywhere(api: ApiServer) -> None:
    jobs_token = new_token(JOBS_OWNER, "write")
    with api.client() as anonymous, api.client("sct_made_up") as unknown, api.client(jobs_token) as other:
        for method, path, body, headers in ROUTES:
            for client in (anonymous, unknown):
                response = _call(client, method, path, body, headers)
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
            response = _call(other, method, path, body, headers)
            if path in ("/contracts", "/health/detailed"):  # lists: only the owner's own contracts
                assert response.status_code == 200
                names = [c["name"] if "name" in c else c["contract"]
                         for c in (response.json() if path == "/contracts" else response.json()["contracts"])]
                assert names == ["jobs"], names
            else:  # another owner's contract answers as a missing one does
                assert response.status_code == 404, (method, path, response.text)
                assert response.json()["detail"] == ("no valid contract named 'books' that "
                                                     "team:recruiting-analytics owns")
        assert other.get("/events").status_code == 200  # all of its own contracts' events


def test_every_route_with_a_valid_token(api: ApiServer, demo_home: Path) -> None:
    token = new_token(BOOKS_OWNER, "write")
    reader = new_token(BOOKS_OWNER, "read")
    jobs = new_token(JOBS_OWNER, "write")
    with api.client(token) as client, api.client(reader) as read_only, api.client(jobs) as jobs_client:
        assert [c["name"] for c in client.get("/contracts").json()] == ["books", "reviews"]
        detail = client.get("/contracts/books").json()
        targets = {t["key"]: t for t in detail["targets"]}
        assert set(targets) == {"dune", "neuromancer", "hyperion"}
        assert targets["neuromancer"]["last_outcome"] == "quarantined" and targets["neuromancer"]["paused"]
        assert detail["definition"]["fields"]["price"]["selector"]
        page = client.get("/contracts/books/accepted", params={"limit": 1, "offset": 1}).json()
        assert page["total"] == 3 and len(page["items"]) == 1 and page["items"][0]["partition"] == "hyperion"
        one = client.get("/contracts/books/accepted", params={"partition": "dune"}).json()["items"]
        assert [(i["partition"], i["record"]["sku"]) for i in one] == [("dune", "BK-0001")]
        assert client.get("/contracts/nope").status_code == 404

        # writes: a read token may not; the write token's principal is recorded
        assert read_only.post("/reviews/books/neuromancer",
                              json={"decision": "accept", "reason": "fine"}).status_code == 403
        review = client.post("/reviews/books/neuromancer", json={"decision": "accept", "reason": "new list price"})
        assert review.status_code == 200, review.text
        assert review.json()["accepted_version"] == 2 and BOOKS_OWNER in review.json()["reviewer"]
        again = client.post("/reviews/books/neuromancer", json={"decision": "accept", "reason": "twice"})
        assert again.status_code == 409 and "nothing quarantined" in again.json()["detail"]
        assert client.get("/contracts/books/accepted", params={"partition": "neuromancer"}
                          ).json()["items"][0]["record"]["price"] == 29.0
        paused = client.post("/contracts/books/targets/dune/pause", json={"reason": "supplier outage"}).json()
        assert paused["paused"] and "supplier outage" in paused["reason"] and BOOKS_OWNER in paused["reason"]
        assert client.post("/contracts/books/targets/dune/pause", json={"reason": ""}).status_code == 400
        assert not client.post("/contracts/books/targets/dune/resume").json()["paused"]
        assert client.post("/contracts/books/targets/nope/resume").status_code == 404
        assert client.post("/contracts/books/targets", json={"urls": ["https://x.example/1"]}).status_code == 400
        added = jobs_client.post("/contracts/jobs/targets", json={"urls": ["https://jobs.example.com/job/77.html"]})
        assert added.status_code == 201 and list(added.json()["added"].values()) == [
            "https://jobs.example.com/job/77.html"]
        assert jobs_client.post("/contracts/jobs/targets", json={"urls": ["not a url"]}).status_code == 400

        # the trail shows what was done, as the principal
        events = client.get("/events", params={"contract": "books", "limit": 1000}).json()["events"]
        stages = [(e["stage"], e["partition"]) for e in events]
        assert ("reviewed", "neuromancer") in stages and ("paused", "dune") in stages and ("resumed", "dune") in stages
        with client.stream("GET", "/events/stream", params={"contract": "books"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            first = next(line for line in stream.iter_lines() if line.startswith("id: "))
        assert first == f"id: {events[0]['id']}"
        health = client.get("/health/detailed").json()["contracts"]
        assert [h["contract"] for h in health] == ["books", "reviews"] and health[0]["review_backlog"] == 1
        assert httpx.get(f"{api.url}/health/live").json() == {"status": "ok"}
        ready = httpx.get(f"{api.url}/health/ready").json()
        assert ready == {"status": "ok", "checks": {"project_store": "ok", "dagster_instance": "ok"}}

    # every write is audited with principal, action, target, reason and request id
    engine = sa.create_engine(f"sqlite:///{demo_home / 'scrape_contracts.db'}")
    with engine.connect() as conn:
        audit = conn.execute(sa.text("SELECT owner, action, contract, target, reason, request_id "
                                     "FROM sc_api_audit ORDER BY id")).all()
    engine.dispose()
    # the refused second review is there too: it reached the review job, which said no
    assert [(a.action, a.target, a.reason) for a in audit] == [
        ("review_accept", "neuromancer", "new list price"), ("review_accept", "neuromancer", "twice"),
        ("pause", "dune", "supplier outage"), ("resume", "dune", ""),
        ("add_targets", "jobs.example.com_job_77.html-c94106d0d5", "")]
    assert all(a.request_id and a.owner for a in audit)
    assert audit[0].reason == "new list price" and audit[0].owner == BOOKS_OWNER
    # no token in the server's log
    log = api.log.read_text()
    assert token not in log and reader not in log and jobs not in log


def test_same_idempotency_key_gives_the_same_runs_and_another_body_409(api: ApiServer) -> None:
    token = new_token(BOOKS_OWNER, "write")
    with api.client(token) as client:
        first = client.post("/contracts/books/runs", json={"partition": "dune"},
                            headers={"Idempotency-Key": "nightly-1"})
        assert first.status_code == 202, first.text
        runs = [r["run_id"] for r in first.json()["runs"]]
        assert runs == [idempotent_run_id("books", "dune", "nightly-1")] and not first.json()["replayed"]
        second = client.post("/contracts/books/runs", json={"partition": "dune"},
                             headers={"Idempotency-Key": "nightly-1"})
        assert second.status_code == 202 and [r["run_id"] for r in second.json()["runs"]] == runs
        assert second.json()["replayed"]
        other = client.post("/contracts/books/runs", json={"partition": "dune", "force": True},
                            headers={"Idempotency-Key": "nightly-1"})
        assert other.status_code == 409 and "nightly-1" in other.json()["detail"]
        # a key is scoped to its contract's targets: all targets (the paused ones skipped) as batched runs
        batch = client.post("/contracts/books/runs", headers={"Idempotency-Key": "sweep"}).json()
        assert len(batch["runs"]) == 1 and batch["skipped_paused"] == ["hyperion", "neuromancer"]
        assert client.post("/contracts/books/runs", json={}).status_code == 422  # no key
    assert first.json()["runs"][0]["status"] == "SUBMITTED"  # the answer comes before `dagster job launch` ends
    with dg.DagsterInstance.get() as instance:
        wanted = sorted(runs + [batch["runs"][0]["run_id"]])
        deadline = time.monotonic() + 240  # each launch loads the code location once
        while True:
            queued = instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/trigger": "api"}))
            # created (NOT_STARTED), then submitted (QUEUED) by `dagster job launch`
            submitted = all(r.status != dg.DagsterRunStatus.NOT_STARTED for r in queued)
            if (sorted(r.run_id for r in queued) == wanted and submitted) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sorted(r.run_id for r in queued) == wanted
        assert all(r.status == dg.DagsterRunStatus.QUEUED for r in queued), [(r.run_id, r.status) for r in queued]


def test_revoked_token_is_refused_on_its_next_call(api: ApiServer) -> None:
    token = new_token(BOOKS_OWNER, "read")
    with api.client(token) as client:
        assert client.get("/contracts").status_code == 200
        token_id = next(line.split()[0] for line in cli("tokens", "list").stdout.splitlines() if "read" in line)
        assert cli("tokens", "revoke", token_id).returncode == 0
        refused = client.get("/contracts")
        assert refused.status_code == 401 and token not in refused.text
