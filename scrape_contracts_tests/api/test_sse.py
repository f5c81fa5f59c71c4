"""Server-Sent Events: resumable with Last-Event-ID on another API process, no gaps or repeats under writes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa

from scrape_contracts_tests.api.servers import ApiServer, new_token
from scrape_contracts_tests.private_postgres import private_cluster

WRITER = textwrap.dedent("""
    import sys, dagster as dg
    from scrape_contracts.defs.names import candidate_key
    with dg.DagsterInstance.get() as instance:
        for i in range(int(sys.argv[1])):
            instance.report_runless_asset_event(dg.AssetObservation(
                asset_key=candidate_key("books"), partition="dune", metadata={"stage": "probe", "n": i}))
""")


def _events(lines: Iterator[str], count: int) -> list[dict]:
    found = []
    event_id = None
    for line in lines:
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: ") and event_id is not None:
            data = json.loads(line[6:])
            assert data["id"] == event_id
            found.append(data)
            event_id = None
            if len(found) == count:
                return found
    raise AssertionError(f"the stream ended after {len(found)} of {count} events")


def _all_events(client: httpx.Client) -> list[dict]:
    events, after = [], None
    while True:
        page = client.get("/events", params={"contract": "books", "limit": 50, **({"after": after} if after else {})}
                          ).json()
        if not page["events"]:
            return events
        events += page["events"]
        after = page["next"]


def test_reconnect_with_last_event_id_to_a_second_process_gets_exactly_the_rest(demo_home: Path) -> None:
    token = new_token("data-team@example.com", "read")
    writes = 40
    with ApiServer(demo_home) as first, ApiServer(demo_home) as second:
        with first.client(token) as client:
            before = _all_events(client)
        # another process commits events the whole time both streams are read
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(writes)], env=dict(os.environ))
        try:
            with first.client(token) as client, client.stream("GET", "/events/stream",
                                                              params={"contract": "books"}) as stream:
                head = _events(stream.iter_lines(), 3)
            with second.client(token) as client, client.stream(
                    "GET", "/events/stream", params={"contract": "books"},
                    headers={"Last-Event-ID": head[-1]["id"]}) as stream:
                rest = _events(stream.iter_lines(), len(before) + writes - 3)
        finally:
            assert writer.wait(timeout=120) == 0
        with second.client(token) as client:
            expected = _all_events(client)
    assert [e["id"] for e in head] == [e["id"] for e in expected[:3]]
    assert [e["id"] for e in head + rest] == [e["id"] for e in expected]
    assert head + rest == expected
    probes = [e["metadata"]["n"] for e in rest if e["stage"] == "probe"]
    assert probes == list(range(writes))


def test_revoked_token_ends_an_open_stream(demo_home: Path) -> None:
    from scrape_contracts_tests.api.servers import tokens

    token = new_token("data-team@example.com", "read")
    with ApiServer(demo_home) as api, api.client(token) as client, client.stream(
            "GET", "/events/stream", params={"contract": "books", "after": "999999999"}) as stream:
        tokens().revoke(token)
        lines = [line for line in stream.iter_lines() if line and not line.startswith(("retry:", ":"))]
    assert lines[0] == "event: end" and "revoked" in lines[1] and token not in lines[1]


def test_cursor_stops_below_an_uncommitted_event_id_on_postgres(tmp_path: Path) -> None:
    """PostgreSQL hands out ids before commit: a reader must not pass an id a transaction still holds.

    On a cluster of the test's own: a snapshot's xmin is cluster-wide, so any transaction another test holds
    open on the shared server (a frozen worker's, for one) would hold the mark back as well.
    """
    with private_cluster() as cluster:
        _cursor_stops_below_an_uncommitted_event_id(cluster.url, tmp_path)


def _cursor_stops_below_an_uncommitted_event_id(pg_database: str, tmp_path: Path) -> None:
    from scrape_contracts.defs.names import candidate_key
    from scrape_contracts.api.trail import Cursor, HighWater, read_events

    overrides = {"storage": {"postgres": {"postgres_url": pg_database}}}
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=overrides) as instance:
        def observe(n: int) -> None:
            instance.report_runless_asset_event(dg.AssetObservation(
                asset_key=candidate_key("books"), partition="dune", metadata={"stage": "probe", "n": n}))

        observe(0)
        water = HighWater(instance)  # an API process observes the sequence at each poll
        assert water.mark(wait_s=5) >= 1
        engine = sa.create_engine(pg_database)
        held = engine.connect()
        transaction = held.begin()
        # a writer that has its id but has not committed (what a slow INSERT of an event looks like)
        held.execute(sa.text("SELECT pg_current_xact_id()"))
        held_id = held.execute(sa.text("SELECT nextval('event_logs_id_seq')")).scalar()
        observe(1)  # committed, with a higher id than the held one
        try:
            mark = water.mark(wait_s=0.3)
            assert mark < held_id
            events, cursor = read_events(instance, ["books"], Cursor(0), 100, mark)
            assert [e.metadata["n"] for e in events] == [0] and cursor.storage_id < held_id
        finally:
            transaction.rollback()
            held.close()
            engine.dispose()
        mark = water.mark(wait_s=5)
        assert mark > held_id
        events, _ = read_events(instance, ["books"], cursor, 100, mark)
        assert [e.metadata["n"] for e in events] == [1]
    # SQLite needs no mark: ids become visible in commit order


@pytest.mark.parametrize("text", ["12-x", "-1", "1e5", "12-3-4", "", "9" * 19])
def test_bad_cursors_are_refused(text: str) -> None:
    from scrape_contracts.api.trail import Cursor

    if text == "":
        assert Cursor.parse(text) == Cursor(0)
        return
    with pytest.raises(ValueError, match="not an event cursor"):
        Cursor.parse(text)


def _hub_door(harness):  # -> FrontDoor over two contracts of team:shop and one of team:other
    from scrape_contracts.api import FrontDoor

    for name, owner in (("alpha", "team:shop"), ("beta", "team:shop"), ("other", "team:other")):
        harness.write(f"{name}.yaml", f"""
            name: {name}
            owners: [{owner}]
            targets:
              - url: https://shop.example/{name}/1
                key: p1
            fetch: {{adapter: http}}
            fields:
              title: {{selector: "#title"}}
            """)
    return FrontDoor(contracts_dir=harness.contracts_dir, db_url=harness.backend.db_url, instance=harness.instance)


def _observe(instance: dg.DagsterInstance, contract: str, n: int) -> None:
    from scrape_contracts.defs.assets import candidate_key

    instance.report_runless_asset_event(dg.AssetObservation(
        asset_key=candidate_key(contract), partition="p1", metadata={"stage": "probe", "n": n}))


def test_open_streams_are_capped_and_a_closed_one_frees_its_place(sqlite_harness) -> None:
    from scrape_contracts.api.rest import create_app
    from scrape_contracts_tests.api.servers import ThreadedApi

    door = _hub_door(sqlite_harness)
    token = door.tokens.create("shop", "read")[1]
    app = create_app(front_door=door, max_streams=2, stream_poll_s=0.05)
    with ThreadedApi(app) as api, api.client(token) as client, contextlib.ExitStack() as stack:
        opened = client.stream("GET", "/events/stream")
        first = opened.__enter__()
        second = stack.enter_context(client.stream("GET", "/events/stream", params={"contract": "alpha"}))
        assert first.status_code == second.status_code == 200
        refused = client.get("/events/stream")
        assert refused.status_code == 429 and refused.headers["retry-after"]
        assert "SCRAPE_CONTRACTS_API_MAX_STREAMS" in refused.json()["detail"]
        assert client.get("/health/live").status_code == 200 and client.get("/contracts").status_code == 200
        opened.__exit__(None, None, None)
        deadline = time.monotonic() + 30
        while True:  # the server notices the closed stream at its next write or disconnect check
            with client.stream("GET", "/events/stream") as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "the closed stream's place was never freed"
            time.sleep(0.1)


def test_one_poller_fans_out_to_every_stream_by_owner(sqlite_harness) -> None:
    from scrape_contracts.api.rest import create_app
    from scrape_contracts_tests.api.servers import ThreadedApi

    door = _hub_door(sqlite_harness)
    shop, other = door.tokens.create("shop", "read")[1], door.tokens.create("other", "read")[1]
    revoked = door.tokens.create("shop", "read")[1]
    _observe(sqlite_harness.instance, "alpha", 0)  # before any stream: each reads the history first
    app = create_app(front_door=door, stream_poll_s=0.05)
    with ThreadedApi(app) as api, api.client(shop) as shop_client, api.client(other) as other_client, \
            api.client(revoked) as revoked_client, contextlib.ExitStack() as stack:
        streams = [stack.enter_context(shop_client.stream("GET", "/events/stream", params=params))
                   for params in ({}, {"contract": "alpha"}, {"after": "0"}, {})]
        theirs = stack.enter_context(other_client.stream("GET", "/events/stream"))
        doomed = stack.enter_context(revoked_client.stream("GET", "/events/stream"))
        lines = [s.iter_lines() for s in streams]
        assert [_events(line, 1)[0]["metadata"]["n"] for line in lines] == [0, 0, 0, 0]
        _observe(sqlite_harness.instance, "beta", 1)
        _observe(sqlite_harness.instance, "alpha", 2)
        _observe(sqlite_harness.instance, "other", 3)
        got = [[e["metadata"]["n"] for e in _events(line, 1 if i == 1 else 2)] for i, line in enumerate(lines)]
        assert got == [[1, 2], [2], [1, 2], [1, 2]]
        their_lines = theirs.iter_lines()  # kept: a dropped iterator closes its response
        assert [e["metadata"]["n"] for e in _events(their_lines, 1)] == [3]
        door.tokens.revoke(revoked)
        ended = [line for line in doomed.iter_lines() if line.startswith(("event:", "data:"))]
        assert ended[-2] == "event: end" and "revoked" in ended[-1]
        _observe(sqlite_harness.instance, "alpha", 4)
        assert [e["metadata"]["n"] for e in _events(lines[1], 1)] == [4]  # the others go on
        assert app.state.hub.open_streams == 5 and app.state.hub.polls > 0
