"""The repository's example contracts (contracts/*.yaml) in a test's folder, scraped from examples/site/v1."""

from __future__ import annotations

import shutil
from pathlib import Path

from scrape_contracts_tests.conftest import Harness

REPO = Path(__file__).resolve().parents[2]


def copy_examples(harness: Harness) -> list[str]:
    """The example contracts copied into the harness's folder, the site snapshot and targets file they name
    beside it (their paths are relative); their names."""
    shutil.copytree(REPO / "examples", harness.contracts_dir.parent / "examples", dirs_exist_ok=True)
    names = []
    for path in sorted((REPO / "contracts").glob("*.yaml")):
        shutil.copy(path, harness.contracts_dir / path.name)
        names.append(path.stem)
    return names


def scrape_examples(harness: Harness) -> None:
    """Every target of every example contract scraped once and accepted (the jobs' targets added first)."""
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.defs.targets import add_targets

    loaded = load_contracts(harness.contracts_dir).by_name()
    urls = [line for line in (REPO / "examples/targets/jobs.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    add_targets(loaded["jobs"], urls, harness.instance, harness.store)
    defs = harness.definitions()
    for name, item in loaded.items():
        keys = [t.partition_key for t in item.contract.static_targets] or list(harness.store.list_targets(name))
        for key in keys:
            assert harness.run(name, key, defs).success, (name, key)
