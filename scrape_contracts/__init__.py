"""scrape_contracts: web-scraping contracts as partitioned Dagster assets."""

from scrape_contracts.service.accepted import read_accepted

__all__ = ["read_accepted"]
