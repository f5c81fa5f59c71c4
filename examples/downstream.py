"""A code location with the scraped assets and your own assets downstream of them.

    DAGSTER_HOME=$PWD/.dagster_home dagster asset materialize -f examples/downstream.py --select price_report
    DAGSTER_HOME=$PWD/.dagster_home dagster asset materialize -f examples/downstream.py \
        --select price_with_tax --partition dune
    DAGSTER_HOME=$PWD/.dagster_home dagster dev -f examples/downstream.py
"""

import dagster as dg
import pandas as pd

from scrape_contracts import build_definitions, contract_partitions


@dg.asset(ins={"books": dg.AssetIn(key=["scrape", "books"])})
def price_report(books: pd.DataFrame) -> float:
    """Mean price over the latest accepted record of every book (one row per target)."""
    return float(books["price"].mean())


# one partition per target, the same as scrape/books: each partition receives that target's accepted record
@dg.asset(ins={"book": dg.AssetIn(key=["scrape", "books"])}, partitions_def=contract_partitions("books"))
def price_with_tax(book: dict | None) -> float | None:
    """The accepted price of one book with 19% VAT (None while the target has no accepted record)."""
    return round(book["price"] * 1.19, 2) if book else None


defs = dg.Definitions.merge(build_definitions(), dg.Definitions(assets=[price_report, price_with_tax]))
