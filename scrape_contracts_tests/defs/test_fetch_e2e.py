"""The http adapter through Dagster: real runs on a real instance against a real server on 127.0.0.1.

Each test drives ``scrape_<c>_job`` and reads what an operator would see afterwards: the run's events,
its failure message, the project store and the requests that reached the site.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
import yaml
from dagster._serdes import serialize_value

from scrape_contracts.adapters.store import metadata as store_metadata
from scrape_contracts.defs.names import candidate_key
from scrape_contracts_tests.conftest import Harness, failure_text, product_page
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

pytestmark = pytest.mark.timeout(120)

PARTITION = "p1"
DUNE = {"title": "Dune", "sku": "BK-1", "price": 100.0}


def write_contract(harness: Harness, name: str, url: str, **fetch: Any) -> None:
    """A product contract with one target; ``fetch`` overrides the http settings (None drops a key)."""
    settings: dict[str, Any] = {
        "adapter": "http", "timeout_s": 5, "retries": 0, "allow_private_addresses": True, **fetch,
    }
    contract = {
        "name": name,
        "targets": [{"url": url, "key": PARTITION}],
        "fetch": {key: value for key, value in settings.items() if value is not None},
        "fields": {
            "title": {"selector": "#title"},
            "sku": {"selector": "#sku"},
            "price": {"selector": "#price", "type": "price", "rules": {"min": 0}},
        },
    }
    # safe_dump rather than an f-string: "${NAME}" and quotes in header values need no escaping
    harness.write(f"{name}.yaml", yaml.safe_dump(contract, sort_keys=False, allow_unicode=True))


def counted(handler: Callable[[int, Request], Response]) -> Callable[[Request], Response]:
    """Passes the 0-based number of the request to ``handler`` (the server answers in several threads)."""
    counter = itertools.count()
    lock = threading.Lock()

    def handle(request: Request) -> Response:
        with lock:
            n = next(counter)
        return handler(n, request)

    return handle


def stage_metadata(harness: Harness, contract: str, run_id: str, stage: str) -> list[dict[str, Any]]:
    """Metadata of this run's ``stage`` observations on the candidate asset, oldest first."""
    records = harness.instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=candidate_key(contract), asset_partitions=[PARTITION]), limit=200
    ).records
    found = [
        {key: value.value for key, value in record.asset_observation.metadata.items()}
        for record in records
        if record.run_id == run_id
    ]
    return [m for m in reversed(found) if m.get("stage") == stage]


def failure_chain(result: dg.ExecuteInProcessResult) -> str:
    """``failure_text`` plus the causes: once the op's RetryPolicy gives up, Dagster's own message is
    "Exceeded max_retries of N" and the reason is only in the error's cause (which the UI shows)."""
    parts = [failure_text(result)]
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error is not None:
                parts.append(error.message)
                error = error.cause or error.context
    return "\n".join(parts)


def event_types(result: dg.ExecuteInProcessResult) -> list[str]:
    return [event.event_type_value for event in result.all_events]


def accepted_versions(harness: Harness, contract: str) -> list[int]:
    return [v.version for v in harness.store.accepted_history(contract, PARTITION)]


# --- retries -------------------------------------------------------------------------------------


def test_429_with_retry_after_then_200_is_one_materialisation_with_attempts(
    harness: Harness, site: FixtureSite
) -> None:
    page = product_page("Dune", "BK-1", "$100.00").encode()

    def rate_limited(n: int, _request: Request) -> Response:
        if n < 2:
            return Response(429, b"slow down", {"Retry-After": "1"})
        return Response(200, page)

    site.set_handler("/rl", counted(rate_limited))
    write_contract(harness, "shop", site.url("/rl"), retries=2)

    result = harness.run("shop", PARTITION)

    assert result.success, failure_text(result)
    assert len(site.requests_to("/rl")) == 3
    materialised = [e.asset_key.to_user_string() for e in result.get_asset_materialization_events()]
    assert sorted(materialised) == ["scrape/shop", "scrape/shop/candidate"]
    # the fetcher waited out the 429s itself; Dagster never saw a failure to retry
    assert "STEP_UP_FOR_RETRY" not in event_types(result)
    [fetched] = stage_metadata(harness, "shop", result.run_id, "fetched")
    attempts = fetched["attempts"]
    assert [a["status"] for a in attempts] == [429, 429, 200]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert [a["waited_s"] for a in attempts] == [0.0, 1.0, 1.0]  # Retry-After, not the backoff
    assert harness.accepted("shop", PARTITION) == DUNE


# --- failures that keep the accepted data --------------------------------------------------------


def test_404_fails_at_once_without_any_retry_and_keeps_accepted(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    # retries: 2 so that a retried 404 would show up as extra requests
    write_contract(harness, "shop", site.url("/p/1"), retries=2)
    assert harness.run("shop", PARTITION).success

    site.set_page("/p/1", "gone", status=404)
    result = harness.run("shop", PARTITION)

    assert not result.success
    text = failure_text(result)
    assert "HTTP 404" in text and site.url("/p/1") in text and "check the URL in the contract" in text
    # one request in this run: neither the fetcher nor the op's RetryPolicy retried it
    assert len(site.requests_to("/p/1")) == 2
    assert "STEP_UP_FOR_RETRY" not in event_types(result)
    [failed] = stage_metadata(harness, "shop", result.run_id, "fetch_failed")
    assert (failed["kind"], [a["status"] for a in failed["attempts"]]) == ("http_status", [404])
    assert harness.store.latest_candidate("shop", PARTITION, run_id=result.run_id) is None
    assert harness.accepted("shop", PARTITION) == DUNE and accepted_versions(harness, "shop") == [1]


def test_slow_server_times_out_and_keeps_accepted(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    page = product_page("Dune", "BK-1", "$100.00").encode()
    hang = threading.Event()
    # status -1: the site holds the connection open without answering
    site.set_handler("/slow", lambda _request: Response(-1) if hang.is_set() else Response(200, page))
    write_contract(harness, "shop", site.url("/slow"), timeout_s=0.5)
    assert harness.run("shop", PARTITION).success

    hang.set()
    result = harness.run("shop", PARTITION)

    assert not result.success
    text = failure_chain(result)
    assert "timed out" in text and "no response within 0.5s" in text and "fetch.timeout_s" in text
    assert site.url("/slow") in text
    failures = stage_metadata(harness, "shop", result.run_id, "fetch_failed")
    assert {f["kind"] for f in failures} == {"timeout"}
    # retries: 0 in the contract is one request in all, and no Dagster retry of the step on top
    assert len(failures) == 1 and len(site.requests_to("/slow")) == 2
    assert "STEP_UP_FOR_RETRY" not in event_types(result)
    assert harness.store.latest_candidate("shop", PARTITION, run_id=result.run_id) is None
    assert harness.accepted("shop", PARTITION) == DUNE and accepted_versions(harness, "shop") == [1]


@pytest.mark.parametrize("retries", [0, 2])
def test_the_contracts_retries_are_the_only_retries(sqlite_harness: Harness, site: FixtureSite, retries: int) -> None:
    """fetch.retries counts every retry of a single-target run: the fetch step is not retried by Dagster."""
    harness = sqlite_harness
    site.set_handler("/down", lambda _request: Response(503, b"down", {"Retry-After": "0"}))
    write_contract(harness, "shop", site.url("/down"), retries=retries)
    result = harness.run("shop", PARTITION)
    assert not result.success
    assert len(site.requests_to("/down")) == retries + 1
    assert "STEP_UP_FOR_RETRY" not in event_types(result)
    assert "503" in failure_text(result)


# --- conditional requests ------------------------------------------------------------------------


def test_304_and_identical_bytes_under_a_new_etag_are_unchanged(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    body = product_page("Dune", "BK-1", "$100.00").encode()
    current_etag = ['"v1"']

    def conditional(request: Request) -> Response:
        etag = current_etag[0]
        if request.headers.get("if-none-match") == etag:
            return Response(304, b"", {"ETag": etag})
        return Response(200, body, {"ETag": etag})

    site.set_handler("/c", conditional)
    write_contract(harness, "shop", site.url("/c"))
    first = harness.run("shop", PARTITION)
    assert first.success and accepted_versions(harness, "shop") == [1]
    assert "if-none-match" not in site.requests_to("/c")[0].headers

    not_modified = harness.run("shop", PARTITION)

    assert not_modified.success, failure_text(not_modified)
    # the validator of the accepted page was sent and the site answered 304
    assert site.requests_to("/c")[1].headers["if-none-match"] == '"v1"'
    [fetched] = stage_metadata(harness, "shop", not_modified.run_id, "fetched")
    assert (fetched["status"], fetched["not_modified"]) == (304, True)
    candidate = harness.store.latest_candidate("shop", PARTITION, run_id=not_modified.run_id)
    assert candidate.outcome == "unchanged"
    assert accepted_versions(harness, "shop") == [1]

    # the site re-tags the same bytes: a full 200, recognised by its hash
    current_etag[0] = '"v2"'
    retagged = harness.run("shop", PARTITION)

    assert retagged.success, failure_text(retagged)
    [fetched] = stage_metadata(harness, "shop", retagged.run_id, "fetched")
    assert (fetched["status"], fetched["not_modified"], fetched["unchanged_content"]) == (200, False, True)
    assert harness.store.latest_candidate("shop", PARTITION, run_id=retagged.run_id).outcome == "unchanged"
    assert accepted_versions(harness, "shop") == [1]
    assert harness.accepted("shop", PARTITION) == DUNE


# --- address guard -------------------------------------------------------------------------------


def test_loopback_target_is_refused_without_opt_in(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page())
    write_contract(harness, "shop", site.url("/p/1"), allow_private_addresses=None)

    result = harness.run("shop", PARTITION)

    assert not result.success
    text = failure_text(result)
    assert "127.0.0.1" in text and "fetch.allow_private_addresses: true" in text
    assert site.requests == []
    assert "STEP_UP_FOR_RETRY" not in event_types(result)  # a refusal is not worth retrying
    assert harness.accepted("shop", PARTITION) is None


# --- charsets ------------------------------------------------------------------------------------


def test_windows_1252_page_without_charset_extracts_correct_text(sqlite_harness: Harness, site: FixtureSite) -> None:
    harness = sqlite_harness
    title = "Crème brûlée – 12,50 €"
    html = (
        "<!doctype html><html><head><title>Dessert</title></head><body>"
        f'<h1 id="title">{title}</h1><p>SKU: <span id="sku">D-12</span></p>'
        '<div class="buy">Preis: <span id="price">12,50 €</span></div></body></html>'
    )
    # no charset anywhere: not in Content-Type, no <meta>; "–" and "€" exist only in windows-1252
    site.set_page("/dessert", html.encode("cp1252"), headers={"Content-Type": "text/html"})
    write_contract(harness, "menu", site.url("/dessert"))

    result = harness.run("menu", PARTITION)

    assert result.success, failure_text(result)
    assert harness.accepted("menu", PARTITION) == {"title": title, "sku": "D-12", "price": 12.5}
    [fetched] = stage_metadata(harness, "menu", result.run_id, "fetched")
    assert fetched["encoding"] == "cp1252"


# --- secrets -------------------------------------------------------------------------------------


def places_containing(harness: Harness, needle: str) -> set[str]:
    """Where ``needle`` occurs: any run, any event of any run, any row of the project store."""
    found: set[str] = set()
    for run in harness.instance.get_runs():
        if needle in serialize_value(run):
            found.add("run")
        for entry in harness.instance.all_logs(run.run_id):
            if needle in serialize_value(entry) or needle in str(entry):
                found.add("event log")
    engine = sa.create_engine(harness.backend.db_url)
    try:
        with engine.connect() as conn:
            for table in store_metadata.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    if needle in json.dumps(row._asdict(), default=str, ensure_ascii=False):
                        found.add(table.name)
    finally:
        engine.dispose()
    return found


def test_secret_header_reaches_the_site_but_not_the_event_log_or_store(
    harness: Harness, site: FixtureSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"sk-{secrets.token_hex(16)}"
    monkeypatch.setenv("TEST_SECRET", token)
    page = product_page("Dune", "BK-1", "$100.00").encode()
    failing = threading.Event()

    def careless(n: int, request: Request) -> Response:
        key = request.headers.get("x-api-key", "")
        # a careless site echoing the key, including in a validator that the store keeps
        echo = {"X-Echo": key, "ETag": f'"{key}"', "WWW-Authenticate": f'Key error="invalid", key="{key}"'}
        if not failing.is_set():
            return Response(200, page, echo)
        # two retried 500s, then a refusal: a failing run with retries but no RetryPolicy back-off
        if n < 3:
            return Response(500, f"bad key {key}".encode(), {**echo, "Retry-After": "0"})
        return Response(401, f"bad key {key}".encode(), echo)

    site.set_handler("/secret", counted(careless))
    write_contract(harness, "shop", site.url("/secret"), retries=2,
                   headers={"X-Api-Key": "${TEST_SECRET}", "Authorization": "Bearer ${TEST_SECRET}"})

    ok = harness.run("shop", PARTITION)
    assert ok.success, failure_text(ok)
    sent = site.requests_to("/secret")[0].headers
    assert (sent["x-api-key"], sent["authorization"]) == (token, f"Bearer {token}")
    # the echo did travel into what is stored, scrubbed: the scan below has something to miss
    stored = harness.store.latest_candidate("shop", PARTITION, run_id=ok.run_id)
    assert stored.details["validators"]["etag"] == '"***"'
    assert places_containing(harness, token) == set()

    failing.set()
    failed = harness.run("shop", PARTITION)
    assert not failed.success
    assert "HTTP 401" in failure_text(failed)
    [fetch_failed] = stage_metadata(harness, "shop", failed.run_id, "fetch_failed")
    assert [a["status"] for a in fetch_failed["attempts"]] == [500, 500, 401]
    assert all(r.headers["x-api-key"] == token for r in site.requests_to("/secret"))
    assert places_containing(harness, token) == set()
    # the scan does reach events and store rows: the URL is in both
    assert {"event log", "sc_candidates"} <= places_containing(harness, site.url("/secret"))


def test_unset_secret_variable_fails_once_naming_it_without_a_request(
    sqlite_harness: Harness, site: FixtureSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = sqlite_harness
    monkeypatch.delenv("SC_E2E_UNSET_TOKEN", raising=False)
    site.set_page("/p/1", product_page())
    write_contract(harness, "shop", site.url("/p/1"), headers={"X-Api-Key": "${SC_E2E_UNSET_TOKEN}"})

    result = harness.run("shop", PARTITION)

    assert not result.success
    text = failure_text(result)
    assert "${SC_E2E_UNSET_TOKEN} in header 'X-Api-Key'" in text and "not set" in text
    assert site.requests == []
    assert "STEP_UP_FOR_RETRY" not in event_types(result)  # retrying cannot set a variable
    [failed] = stage_metadata(harness, "shop", result.run_id, "fetch_failed")
    assert failed["kind"] == "invalid_config"
