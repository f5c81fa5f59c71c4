"""What only the async path has: many tasks on one fetcher, a bounded pool, DNS off the event loop,
cancellation, and ``async_fetcher_for``. Every shared guarantee is tested on both paths in test_fetch.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from scrape_contracts.adapters.fetch import (
    AsyncHttpFetcher,
    FetchError,
    FixtureFetcher,
    InlineAsyncFetcher,
    async_fetcher_for,
)
from scrape_contracts.adapters.fetch import http_async
from scrape_contracts.adapters.fetch.client import default_ssl_context
from scrape_contracts.adapters.fetch.pool import AsyncPool
from scrape_contracts.adapters.netguard import system_resolver
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.adapters.test_fetch import host_port, other_site, site  # noqa: F401 (fixtures)
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

pytestmark = pytest.mark.timeout(60)


def test_many_tasks_share_one_fetcher_within_its_pool(site: FixtureSite) -> None:
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow_page(request: Request) -> Response:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.01)
        with lock:
            in_flight[0] -= 1
        return Response(200, f"<p>{request.path}</p>".encode())

    for n in range(20):
        site.set_handler(f"/t/{n}", slow_page)

    async def main() -> list[str]:
        async with AsyncHttpFetcher(allowed_hosts=(host_port(site),), max_connections=4) as fetcher:
            pages = await asyncio.gather(*(fetcher.fetch(site.url(f"/t/{n % 20}")) for n in range(200)))
        return [page.html for page in pages]

    htmls = asyncio.run(main())

    assert htmls == [f"<p>/t/{n % 20}</p>" for n in range(200)]
    assert len(site.requests) == 200
    assert 1 < peak[0] <= 4  # concurrent, and never more connections than the pool allows


def test_slow_dns_does_not_hold_up_other_fetches(site: FixtureSite, monkeypatch: pytest.MonkeyPatch) -> None:
    # a blocking lookup: if it ran on the event loop, the 127.0.0.1 fetch would wait the full 0.5 s
    def slow_resolver(host: str) -> list[str]:
        time.sleep(0.5)
        return system_resolver(host)

    monkeypatch.setattr(http_async, "system_resolver", slow_resolver)
    site.set_page("/p", "<p>hi</p>")
    finished: list[str] = []

    async def fetch(fetcher: AsyncHttpFetcher, url: str, name: str) -> None:
        await fetcher.fetch(url)
        finished.append(name)

    async def main() -> None:
        async with AsyncHttpFetcher(allow_private_addresses=True) as fetcher:
            via_dns = site.url("/p").replace("127.0.0.1", "localhost")
            literal = site.url("/p")
            await asyncio.gather(fetch(fetcher, via_dns, "localhost"), fetch(fetcher, literal, "literal"))

    asyncio.run(main())

    assert finished == ["literal", "localhost"]


def test_an_async_resolver_is_awaited_and_its_answer_checked(site: FixtureSite) -> None:
    looked_up: list[str] = []

    async def resolver(host: str) -> list[str]:
        await asyncio.sleep(0)
        looked_up.append(host)
        return ["10.1.2.3"]

    site.set_page("/go", "", status=302, headers={"Location": "http://intranet.test/"})

    async def main() -> FetchError:
        async with AsyncHttpFetcher(allowed_hosts=(host_port(site),), resolver=resolver) as fetcher:
            with pytest.raises(FetchError) as caught:
                await fetcher.fetch(site.url("/go"))
        return caught.value

    error = asyncio.run(main())

    assert looked_up == ["intranet.test"]
    assert error.kind == "blocked_address" and "resolves to 10.1.2.3, a private address" in str(error)


def test_cancelling_a_fetch_cancels_it(site: FixtureSite) -> None:
    site.set_handler("/hang", lambda _request: Response(-1))

    async def main() -> None:
        async with AsyncHttpFetcher(allowed_hosts=(host_port(site),), timeout_s=30) as fetcher:
            task = asyncio.create_task(fetcher.fetch(site.url("/hang")))
            await asyncio.sleep(0.2)
            task.cancel()
            # the cancellation reaches the caller as such, not as a retried or reported fetch failure
            with pytest.raises(asyncio.CancelledError):
                await task

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 5


def test_async_with_closes_the_pool(site: FixtureSite) -> None:
    site.set_page("/p", "<p>hi</p>")

    async def main() -> AsyncHttpFetcher:
        async with AsyncHttpFetcher(allowed_hosts=(host_port(site),)) as fetcher:
            assert (await fetcher.fetch(site.url("/p"))).html == "<p>hi</p>"
        return fetcher

    fetcher = asyncio.run(main())
    assert fetcher._client.is_closed


def test_async_fetcher_for_gives_every_adapter_the_async_interface(tmp_path: Path, site: FixtureSite) -> None:
    (tmp_path / "pages" / "example.test").mkdir(parents=True)
    (tmp_path / "pages" / "example.test" / "index.html").write_text("<p>fixture</p>")
    site.set_page("/p", "<p>http</p>")
    http = FetchSettings(allow_private_addresses=True)
    fixture = FetchSettings(adapter="fixture", fixture_dir="pages")
    misconfigured = FetchSettings(headers={"Authorization": "Bearer ${NOT_SET_ANYWHERE}"})

    async def main() -> None:
        async with async_fetcher_for(http, tmp_path, max_connections=7) as fetcher:
            assert isinstance(fetcher, AsyncHttpFetcher) and fetcher.max_connections == 7
            assert (await fetcher.fetch(site.url("/p"))).html == "<p>http</p>"
        async with async_fetcher_for(fixture, tmp_path) as fetcher:
            assert isinstance(fetcher, InlineAsyncFetcher) and isinstance(fetcher.fetcher, FixtureFetcher)
            assert (await fetcher.fetch("https://example.test/")).html == "<p>fixture</p>"
        async with async_fetcher_for(misconfigured, tmp_path, environ={}) as fetcher:
            with pytest.raises(FetchError) as caught:
                await fetcher.fetch("https://example.test/")
            assert caught.value.kind == "invalid_config" and "NOT_SET_ANYWHERE" in str(caught.value)

    asyncio.run(main())


def test_max_connections_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        AsyncHttpFetcher(max_connections=0)


# --- the connection pool -------------------------------------------------------------------------


def pooled_client(max_connections: int, **timeouts: float) -> tuple[httpx.AsyncClient, AsyncPool]:
    pool = AsyncPool(max_connections=max_connections, ssl_context=default_ssl_context())
    return httpx.AsyncClient(transport=pool, timeout=httpx.Timeout(5, **timeouts)), pool


def test_pool_reuses_one_connection_for_sequential_requests(site: FixtureSite) -> None:
    site.set_page("/p", "<p>hi</p>")

    async def main() -> list[int]:
        client, pool = pooled_client(4)
        async with client:
            seen = []
            for _ in range(30):
                assert (await client.get(site.url("/p"))).text == "<p>hi</p>"
                seen.append(pool.connections)
            not_found = await client.get(site.url("/nowhere"))  # an error answer, body unread
            assert not_found.status_code == 404
        seen.append(pool.connections)
        return seen

    assert asyncio.run(main()) == [1] * 30 + [0]


def test_pool_makes_room_by_closing_an_idle_connection_of_another_origin(
    site: FixtureSite, other_site: FixtureSite
) -> None:
    site.set_page("/a", "a")
    other_site.set_page("/b", "b")

    async def main() -> list[str]:
        client, pool = pooled_client(1)
        async with client:
            urls = (site.url("/a"), other_site.url("/b"), site.url("/a"))
            texts = [(await client.get(url)).text for url in urls]
            assert pool.connections == 1
        return texts

    assert asyncio.run(main()) == ["a", "b", "a"]


def test_pool_wait_is_bounded_and_a_cancelled_waiter_gives_its_turn_back(site: FixtureSite) -> None:
    release = threading.Event()
    site.set_handler("/slow", lambda _request: (release.wait(5), Response(200, b"slow"))[1])
    site.set_page("/p", "<p>hi</p>")

    async def main() -> None:
        client, pool = pooled_client(1, pool=0.2)
        async with client:
            slow = asyncio.create_task(client.get(site.url("/slow")))
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.PoolTimeout):
                await client.get(site.url("/p"))
            waiter = asyncio.create_task(client.get(site.url("/p"), timeout=5))
            await asyncio.sleep(0.05)
            waiter.cancel()
            release.set()
            assert (await slow).text == "slow"
            assert (await client.get(site.url("/p"))).text == "<p>hi</p>"
            assert pool.connections == 1

    asyncio.run(main())


def test_pool_reports_connection_errors_as_httpx_does() -> None:
    free = FixtureSite()
    url = free.url("/gone")
    free.close()

    async def main() -> None:
        client, pool = pooled_client(2)
        async with client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)
            assert pool.connections == 0

    asyncio.run(main())


def test_pool_never_reuses_a_connection_the_server_closed() -> None:
    # a server that answers one request per connection, then closes it without saying so (no
    # "Connection: close"): the idle connection looks reusable, and only its readable socket (the FIN)
    # tells the pool it is gone
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"

    async def main() -> list[str]:
        client, pool = pooled_client(2)
        async with client:
            texts = []
            for _ in range(3):
                texts.append((await client.get(url)).text)
                await asyncio.sleep(0.05)  # the server's close arrives
            return texts

    try:
        assert asyncio.run(main()) == ["ok", "ok", "ok"]
    finally:
        listener.close()
    assert len(accepted) == 3
