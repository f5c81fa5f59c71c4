"""Optional accelerators that a ``dagster.yaml`` may name; nothing here is required.

The product is correct on Dagster's own instance classes (target leases in the project store keep one scraper
per target). What lives here subclasses Dagster's internals, so it is the only package allowed to import
``dagster._``; no shipped config names it.
"""
