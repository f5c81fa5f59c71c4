"""scrape_contracts: web-scraping contracts as partitioned Dagster assets.

- ``ScrapeContracts``: the Component (``dg scaffold defs scrape_contracts.ScrapeContracts <path>``);
- ``build_definitions(directory)``: the same Definitions, for code;
- ``read_accepted(contract)``: the accepted data, as a pandas DataFrame;
- ``contract_partitions(contract, directory)``: a contract's partitions, for assets downstream of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrape_contracts.defs import build_definitions, contract_partitions
    from scrape_contracts.defs.component import ScrapeContracts
    from scrape_contracts.service.accepted import read_accepted

__all__ = ["ScrapeContracts", "build_definitions", "contract_partitions", "read_accepted"]

# imported on first use: Dagster takes seconds to import, and the CLI (which imports this package first)
# needs it for few commands; readers of accepted data need pandas, not Dagster
_HOMES = {
    "ScrapeContracts": "scrape_contracts.defs.component",
    "build_definitions": "scrape_contracts.defs",
    "contract_partitions": "scrape_contracts.defs",
    "read_accepted": "scrape_contracts.service.accepted",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'scrape_contracts' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
