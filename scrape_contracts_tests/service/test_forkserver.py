"""What a batch's processes inherit from the forkserver (service/forkserver.py), instead of building again."""

from __future__ import annotations

import os
import sys
from typing import Any

from scrape_contracts.service.forkserver import worker_context


def _what_was_inherited(answer: Any) -> None:
    from scrape_contracts.adapters.fetch.client import default_ssl_context

    # nothing in this child has asked for either yet: there already means the forkserver made it before the fork
    answer.put((default_ssl_context.cache_info().currsize, "anyio._backends._asyncio" in sys.modules))


def test_a_fetching_process_inherits_what_its_first_request_needs_from_the_forkserver() -> None:
    """The default TLS context, and anyio's asyncio backend (httpcore imports it at the first request)."""
    context = worker_context()
    answer = context.Queue()
    child = context.Process(target=_what_was_inherited, args=(answer,))
    child.start()
    try:
        assert answer.get(timeout=120) == (1, True)
    finally:
        child.join(60)
    assert child.exitcode == 0


def _parse_then_tell(job: Any, pages: Any, results: Any, control: Any, owner: Any, answer: Any) -> None:
    from scrape_contracts.service.batch_worker import worker_main

    worker_main(job, pages, results, control, owner)  # no page storage there: it ends at once, reporting why
    answer.put(os.nice(0))


def test_a_parse_worker_yields_the_cpu_to_the_runs_own_process() -> None:
    from scrape_contracts.service.batch_worker import PARSE_NICENESS, Done, ParseJob

    context = worker_context()
    results, answer = context.Queue(), context.Queue()
    owner, keep = context.Pipe(duplex=False)
    job = ParseJob(index=0, loaded=None, pages="", selectors=None, environ=dict(os.environ))  # type: ignore[arg-type]
    child = context.Process(target=_parse_then_tell, args=(job, None, results, None, owner, answer))
    child.start()
    try:
        assert isinstance(results.get(timeout=120), Done)
        assert answer.get(timeout=60) == min(19, os.nice(0) + PARSE_NICENESS)
    finally:
        child.join(60)
        keep.close()
