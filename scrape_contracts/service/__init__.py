"""The use cases, Dagster-free: scrape a target or a batch, gate the result, accept or quarantine.

``scrape``: the stages of one target (observe the page, extract, validate, heal, decide).
``gate``: what the store does with a candidate (accept, quarantine, reject), always as an explicit call.
``batch``: many targets of one contract in one run, fetching concurrently and parsing on every core.
``records``: the typed records between the stages and the ``Stage`` names of the event trail.
"""
