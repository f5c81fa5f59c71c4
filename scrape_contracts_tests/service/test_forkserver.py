"""What a batch's processes inherit from the forkserver (service/forkserver.py), instead of building again."""

from __future__ import annotations

from typing import Any

from scrape_contracts.service.forkserver import worker_context


def _tls_context_was_inherited(answer: Any) -> None:
    from scrape_contracts.adapters.fetch.client import default_ssl_context

    # nothing in this child has asked for it yet: cached means the forkserver built it before the fork
    answer.put(default_ssl_context.cache_info().currsize)


def test_a_fetching_process_inherits_the_default_tls_context_from_the_forkserver() -> None:
    context = worker_context()
    answer = context.Queue()
    child = context.Process(target=_tls_context_was_inherited, args=(answer,))
    child.start()
    try:
        assert answer.get(timeout=120) == 1
    finally:
        child.join(60)
    assert child.exitcode == 0
