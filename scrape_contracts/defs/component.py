"""``ScrapeContracts``: a folder of contracts as a Dagster Component, added with ``dg scaffold defs``.

The attributes of its ``defs.yaml`` reach the assets as resource configuration (``build_definitions``'
``db_url`` / ``pages``), not through the process environment: settings.py stays its one reader, and
an attribute left out falls back to the setting's variable there.
"""

# no `from __future__ import annotations`: Resolvable reads the attributes' annotations as types

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from pydantic import BaseModel, field_validator

from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.example_contract import write_example

# appended to the scaffolded defs.yaml: the optional attributes, each left out (docs/component.md)
ATTRIBUTES_HELP = """\
  # db_url: postgresql://scrapes@db/scrapes  # default: SCRAPE_CONTRACTS_DB_URL, else SQLite in DAGSTER_HOME
  # pages: store                            # raw pages: a folder, store or s3://bucket/prefix; default: SCRAPE_CONTRACTS_PAGES, else DAGSTER_HOME/artifacts
  # group_name: scraping                     # default: a group per contract
  # chunks: 8                                # batched runs' chunk steps; default: SCRAPE_CONTRACTS_CHUNKS, else 1
  # executor: {celery: {broker: "pyamqp://guest@rabbitmq//"}}  # default: SCRAPE_CONTRACTS_EXECUTOR, else in_process
"""


class ScrapeContractsScaffoldParams(BaseModel):
    """``dg scaffold defs scrape_contracts.ScrapeContracts <path> [--contracts-dir DIR]``."""

    # an existing folder of contracts (relative to where dg runs); without it, an example contract is written
    contracts_dir: str | None = None

    @field_validator("contracts_dir")
    @classmethod
    def _is_a_folder(cls, value: str | None) -> str | None:
        # checked here, before dg creates the component's folder, and reported by dg without a traceback
        if value is not None and not Path(value).resolve().is_dir():
            raise ValueError(f"--contracts-dir {value!r}: {Path(value).resolve()} is not a folder; pass the "
                             "folder holding your contract *.yaml files, or leave it out for an example contract")
        return value


class ScrapeContractsScaffolder(dg.Scaffolder[ScrapeContractsScaffoldParams]):
    """Writes ``defs.yaml``; with no ``--contracts-dir``, also ``contracts/example.yaml`` and the saved page it
    reads, so the project loads (and the example materialises) before the first real contract is written."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScrapeContractsScaffoldParams]:
        return ScrapeContractsScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScrapeContractsScaffoldParams]) -> None:
        folder = request.target_path
        given = request.params.contracts_dir if request.params else None
        if given is None:
            write_example(folder / "contracts")
            contracts_dir = "contracts"
        else:
            contracts_dir = os.path.relpath(Path(given).resolve(), folder.resolve())
        dg.scaffold_component(request, {"contracts_dir": contracts_dir})
        if request.scaffold_format == "yaml" and not request.append:
            with open(folder / "defs.yaml", "a", encoding="utf-8") as f:
                f.write(ATTRIBUTES_HELP)


class ContractsFolderMissing(dg.DagsterInvalidDefinitionError):
    """``contracts_dir`` names no folder: the message says which defs.yaml and what it resolved to."""


@dg.scaffold_with(ScrapeContractsScaffolder)
@dataclass
class ScrapeContracts(dg.Component, dg.Resolvable):
    """Scrape contracts (a folder of YAML files) as partitioned assets: scrape/<contract> for each.

    One partition per target page, with the contracts' blocking checks, schedules, sensors and review job.
    """

    contracts_dir: Annotated[str, dg.Resolver.default(
        description="The folder of contract *.yaml files, relative to this defs.yaml's folder.")] = "contracts"
    db_url: Annotated[str | None, dg.Resolver.default(
        description="SQLAlchemy URL of the project store (accepted data, candidates, reviews). Default: "
                    "SCRAPE_CONTRACTS_DB_URL, else SQLite at $DAGSTER_HOME/scrape_contracts.db.")] = None
    pages: Annotated[str | None, dg.Resolver.default(
        description="Where the raw fetched pages live: a folder (relative to this defs.yaml's folder), "
                    "'store' (the project store's database, which every worker host reaches) or "
                    "s3://bucket/prefix. Default: SCRAPE_CONTRACTS_PAGES, else $DAGSTER_HOME/artifacts.")] = None
    group_name: Annotated[str | None, dg.Resolver.default(
        description="Asset group of every asset made here. Default: one group per contract.")] = None
    chunks: Annotated[int | None, dg.Resolver.default(
        description="Chunk steps per batched run (docs/scale.md). Default: SCRAPE_CONTRACTS_CHUNKS, else 1 "
                    "(one step, as on one machine).")] = None
    executor: Annotated[str | dict[str, dict[str, Any]] | None, dg.Resolver.default(
        description="The batched jobs' executor: in_process, celery, or {celery: {broker: ..., backend: ..., "
                    "config_source: {...}}} (dagster-celery's config). Default: SCRAPE_CONTRACTS_EXECUTOR, "
                    "else in_process.")] = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        directory = context.path / self.contracts_dir
        if not directory.is_dir():
            raise ContractsFolderMissing(
                f"{context.path / 'defs.yaml'}: contracts_dir {self.contracts_dir!r} resolves to {directory}, "
                "which is not a folder; point contracts_dir at the folder holding your contract *.yaml files "
                "(relative to this defs.yaml)")
        return build_definitions(
            directory, db_url=self.db_url, group_name=self.group_name,
            pages=self._pages_location(context.path), chunks=self.chunks, executor=self.executor)

    def _pages_location(self, here: Path) -> str | None:
        if not self.pages or self.pages == "store" or "://" in self.pages:
            return self.pages
        return str(here / self.pages)  # a folder, relative to defs.yaml

