"""Dynamic targets: URL → partition key, recorded in the project store and the Dagster instance."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import dagster as dg
from pydantic import ValidationError

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.paths import confined_problem
from scrape_contracts.contract.targets import DynamicTargets, Target, without_userinfo
from scrape_contracts.defs.partitions import dynamic_partitions_name


def keys_for(urls: Iterable[str]) -> dict[str, str]:
    """partition key → URL; raises ValueError naming every bad URL."""
    keyed: dict[str, str] = {}
    bad = []
    for url in urls:
        try:
            target = Target(url=url.strip())
        except ValidationError as exc:
            bad.append(f"{without_userinfo(url)!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}")
            continue
        keyed[target.partition_key] = target.url
    if bad:
        raise ValueError("invalid target URL(s): " + "; ".join(bad))
    return keyed


def add_targets(loaded: LoadedContract, urls: Iterable[str], instance: dg.DagsterInstance,
                store: ProjectStore) -> dict[str, str]:
    """Add URLs as partitions of a dynamic contract; returns the new ones (key → URL)."""
    contract = loaded.contract
    if not contract.is_dynamic:
        raise ValueError(f"contract {contract.name!r} has static targets: add URLs to its YAML instead")
    keyed = keys_for(urls)
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
