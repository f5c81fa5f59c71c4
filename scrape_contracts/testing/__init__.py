"""Helpers for testing scrape contracts and the healer (importable by users' own tests; no Dagster)."""
