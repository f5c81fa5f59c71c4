"""One partition per target page: static keys from the YAML, or dynamic keys added at runtime."""

from __future__ import annotations

import dagster as dg

from scrape_contracts.contract.model import Contract


def dynamic_partitions_name(contract: str) -> str:
    return f"{contract}_targets"


def partitions_for(contract: Contract) -> dg.PartitionsDefinition:
    if contract.is_dynamic:
        return dg.DynamicPartitionsDefinition(name=dynamic_partitions_name(contract.name))
    return dg.StaticPartitionsDefinition([t.partition_key for t in contract.static_targets])
