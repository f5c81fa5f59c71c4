"""The code location: every contract in SCRAPE_CONTRACTS_DIR (default ``contracts/``) as Dagster assets."""

from scrape_contracts.defs import build_definitions

defs = build_definitions()
