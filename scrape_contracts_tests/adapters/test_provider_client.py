"""The provider adapter's client against the stand-in provider (a stand-in for a hosted scraping API, which
cannot run here), over real HTTP on 127.0.0.1: what may be retried (nothing sent) and what may not (an answer
lost), and the stand-in as docs/providers.md starts it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from scrape_contracts.adapters.fetch.provider import NotSent, ProviderClient, ProviderError, Unanswered
from scrape_contracts.testing.provider import StandInProvider
from scrape_contracts_tests.fixture_site import FixtureSite

pytestmark = pytest.mark.timeout(120)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


def test_a_submit_that_never_left_is_not_sent_and_one_whose_answer_was_lost_is_unanswered() -> None:
    with FixtureSite() as site, StandInProvider(token="secret-token-123456") as provider:
        site.set_page("/p/1", "<html><h1>one</h1></html>")
        # patient: a loaded machine may take seconds to answer; only the stalled poll below waits out a timeout
        client = ProviderClient(provider.url, "secret-token-123456", timeout_s=60)
        submitted = client.submit(site.url("/p/1"), "c/p1")
        assert submitted.job_id == "job-000001" and submitted.cost == 0.01
        status = client.status(submitted.job_id)
        assert (status.state, status.url) == ("done", site.url("/p/1"))
        assert client.result(submitted.job_id).body == "<html><h1>one</h1></html>"

        provider.lose_submits = 1
        with pytest.raises(Unanswered):
            client.submit(site.url("/p/1"), "c/p1")
        assert len(provider.jobs) == 2  # the provider made the job whose answer was lost
        provider.stall_polls = 1
        with pytest.raises(Unanswered):  # the stall answers never: any timeout fires, a short one sooner
            ProviderClient(provider.url, "secret-token-123456", timeout_s=0.5).status(submitted.job_id)
        with pytest.raises(ProviderError) as unknown:
            client.status("job-999999")
        assert unknown.value.status == 404
        with pytest.raises(NotSent):
            ProviderClient(f"http://127.0.0.1:{_closed_port()}", "t").submit(site.url("/p/1"), "c/p1")
        with pytest.raises(ProviderError) as refused:
            ProviderClient(provider.url, "wrong-token").submit(site.url("/p/1"), "c/p1")
        assert refused.value.status == 401 and "SCRAPE_CONTRACTS_PROVIDER_TOKEN" in str(refused.value)
        assert "secret-token-123456" not in repr(client) and "wrong-token" not in str(refused.value)
        assert len(provider.jobs) == 2  # neither of the last two made a job


def test_the_stand_in_starts_as_the_docs_say() -> None:
    # docs/providers.md: python -m scrape_contracts.testing.provider --port 8765 --token demo-token
    port = _closed_port()
    command = [sys.executable, "-m", "scrape_contracts.testing.provider", "--port", str(port),
               "--token", "demo-token"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(f"stand-in provider at http://127.0.0.1:{port}")
        url = f"http://127.0.0.1:{port}/v1/jobs"
        assert httpx.get(url, headers={"Authorization": "Bearer demo-token"}).json() == {"jobs": []}
        assert httpx.get(url).status_code == 401
    finally:
        process.terminate()
        try:
            assert process.wait(timeout=30) == -signal.SIGTERM  # SIGTERM stops it (no handler of its own)
        finally:
            if process.poll() is None:  # not left running when it did not
                process.kill()
                process.wait()


def test_a_repair_is_asked_polled_and_proposes_what_the_stand_in_was_told_and_404_without_repairs() -> None:
    page = "<html><body><h1>Dune</h1><table><tr><td>$12.00</td><td>$12.50</td></tr></table></body></html>"
    with FixtureSite() as site, StandInProvider(token="secret-token-123456") as provider:
        site.set_page("/p/1", page)
        client = ProviderClient(provider.url, "secret-token-123456", timeout_s=2)
        job = client.submit(site.url("/p/1"), "c/p1")
        assert client.status(job.job_id).state == "done"
        provider.repair_selectors = {"price": "table td:first-child", "title": "h1"}
        provider.repair_polls_until_done = 2
        fields = {"price": {"selector": "#price", "type": "price", "last_value": 10.0}}
        asked = client.request_repair(url=site.url("/p/1"), label="c/p1", job_id=job.job_id, fields=fields)
        assert asked.cost == 0.05
        assert client.repair_status(asked.job_id).state == "running"
        done = client.repair_status(asked.job_id)
        # only the fields asked about are proposed, each with the value its selector reads on the job's page
        assert (done.state, done.selectors, done.values) == ("done", {"price": "table td:first-child"},
                                                             {"price": "$12.00"})
        provider.repair_fail, provider.repair_polls_until_done = "layout not understood", 1
        failed = client.repair_status(client.request_repair(url=site.url("/p/1"), label="c/p1",
                                                            job_id=job.job_id, fields=fields).job_id)
        assert (failed.state, failed.error, failed.selectors) == ("failed", "layout not understood", {})
        provider.supports_repair = False
        with pytest.raises(ProviderError) as unsupported:
            client.request_repair(url=site.url("/p/1"), label="c/p1", job_id=job.job_id, fields=fields)
        assert unsupported.value.status == 404
        assert [r["fields"] for r in provider.repair_requests()] == [["price"], ["price"]]
        assert len(provider.submits()) == 1  # repairs are not jobs
        client.close()
