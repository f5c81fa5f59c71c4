"""``ahead``: the producer works in its own thread, at most ``depth`` items ahead; its errors reach the
consumer; a consumer that stops early leaves the producer closed, its clean-up done, before it returns."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from scrape_contracts.service.ahead import ahead


def test_items_in_order_made_in_another_thread() -> None:
    threads = []

    def made() -> Iterator[int]:
        for n in range(50):
            threads.append(threading.get_ident())
            yield n

    assert list(ahead(made())) == list(range(50))
    assert set(threads) == {threads[0]} and threads[0] != threading.get_ident()


def test_never_more_than_depth_ahead() -> None:
    made_count = 0
    seen = []

    def made() -> Iterator[int]:
        nonlocal made_count
        for n in range(10):
            made_count += 1
            yield n

    items = ahead(made(), depth=2)
    first = next(items)
    # whenever it is looked at: the first, the 2 queued, and 1 more that waits for room
    seen.append(first)
    assert made_count <= 4
    seen += list(items)
    assert seen == list(range(10))


def test_the_producers_error_is_raised_in_the_consumer() -> None:
    def made() -> Iterator[int]:
        yield 1
        raise LookupError("store down")

    items = ahead(made())
    assert next(items) == 1
    with pytest.raises(LookupError, match="store down"):
        next(items)


def test_stopping_early_closes_the_producer_before_returning() -> None:
    cleaned = []

    def made() -> Iterator[int]:
        try:
            for n in range(1000):
                yield n
        finally:
            cleaned.append(threading.get_ident())

    items = ahead(made())
    assert next(items) == 0
    items.close()
    assert cleaned and cleaned[0] != threading.get_ident()  # closed in the producer's thread, and already
