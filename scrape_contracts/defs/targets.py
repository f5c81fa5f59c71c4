"""Dynamic targets: URL → partition key, recorded in the project store and the Dagster instance."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import dagster as dg

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.paths import confined_problem
from scrape_contracts.contract.targets import DynamicTargets
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts.service.target_urls import checked_target, shown


_SHOWN = 5  # bad URLs named in one error (the rest counted): an error never echoes a whole request


def keys_for(urls: Iterable[str], *, allow_private: bool = False) -> dict[str, str]:
    """partition key → URL; raises ValueError naming the bad URLs (``service.target_urls.checked_target``
    says which URLs may be targets)."""
    keyed: dict[str, str] = {}
    bad = []
    for url in urls:
        target = checked_target(url, allow_private=allow_private)
        if isinstance(target, str):
            bad.append(f"{shown(url)}: {target}")
            continue
        keyed[target.partition_key] = target.url
    if bad:
        more = f"; and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        raise ValueError("invalid target URL(s): " + "; ".join(bad[:_SHOWN]) + more)
    return keyed


def require_dynamic(loaded: LoadedContract) -> None:
    """Targets are added only to a contract whose targets are dynamic; raises ValueError saying where instead."""
    if not loaded.contract.is_dynamic:
        raise ValueError(f"contract {loaded.contract.name!r} has static targets: add URLs to its YAML instead")


def add_targets(loaded: LoadedContract, urls: Iterable[str], instance: dg.DagsterInstance,
                store: ProjectStore) -> dict[str, str]:
    """Add URLs as partitions of a dynamic contract; returns the new ones (key → URL)."""
    contract = loaded.contract
    require_dynamic(loaded)
    keyed = keys_for(urls, allow_private=contract.fetch.allow_private_addresses)
    # store first: a partition must never exist without its URL
    new = store.add_targets(contract.name, keyed)
    existing = set(instance.get_dynamic_partitions(dynamic_partitions_name(contract.name)))
    missing = [k for k in keyed if k not in existing]
    if missing:
        instance.add_dynamic_partitions(dynamic_partitions_name(contract.name), missing)
    return {k: keyed[k] for k in keyed if k in new or k in missing}


def read_targets_file(loaded: LoadedContract) -> list[str]:
    targets = loaded.contract.targets
    if not isinstance(targets, DynamicTargets) or not targets.file:
        return []
    # checked at load too; again here in case the file was swapped for a symlink since
    problem = confined_problem("targets.file", targets.file, loaded.base_dir)
    if problem:
        raise ValueError(f"{loaded.path}: {problem}")
    path = (loaded.base_dir / targets.file).resolve()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
