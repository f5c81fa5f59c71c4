"""What a batch's fetching process would otherwise do before its first request, done once in the forkserver:
imported there only (service/forkserver.py), so every fetching process forked from it starts with both done,
and a process that never fetches (a command running batches, which imports the batch modules) does neither.

- The default TLS context: each fetching process built its own before, loading the CA bundle again (py-spy:
  a tenth of a fetching process's CPU on a loaded machine in an unchanged sweep of ten runs of 200).
- anyio's asyncio backend, which httpcore imports at a process's first request: 0.1 s between a fresh
  fetching process's first request leaving the fetcher and its first connection (docs/performance.md).
  Loaded by running anyio once, its public way (the forkserver runs no event loop).
"""

from __future__ import annotations

import anyio

from scrape_contracts.adapters.fetch.client import default_ssl_context

default_ssl_context()
anyio.run(anyio.sleep, 0)
