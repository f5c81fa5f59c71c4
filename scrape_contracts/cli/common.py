"""What every ``scrape-contracts`` command shares: one-line errors, the contracts, the instance, the store.

Heavy packages (dagster, the definitions) are imported inside the functions that need them, so that
``--help`` and ``validate`` stay fast.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.contract.loader import LoadedContract, LoadResult

REPO_ROOT = Path(__file__).resolve().parents[2]
# the laptop instance config; demo and dev copy it into DAGSTER_HOME (Dagster reads it only there)
LOCAL_INSTANCE_YAML = REPO_ROOT / "dagster.yaml"


class CliError(Exception):
    """A mistake the user can fix: printed as one ``error:`` line, exit status ``code``, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default prints the whole usage first; one line and where to look is enough
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def load(args: argparse.Namespace) -> LoadResult:
    from scrape_contracts.contract.loader import load_contracts

    return load_contracts(args.contracts_dir)


def contract(args: argparse.Namespace, name: str) -> LoadedContract:
    result = load(args)
    loaded = result.by_name().get(name)
    if loaded is None:
        known = ", ".join(sorted(result.by_name())) or "none"
        raise CliError(f"no valid contract named {name!r} (valid contracts: {known}); "
                       "run `scrape-contracts validate` to see load errors")
    return loaded


_INSTANCES: dict[str, Any] = {}


def instance() -> Any:  # -> dg.DagsterInstance
    """The instance in DAGSTER_HOME, opened once per command (each opening costs about 0.3 s)."""
    import dagster as dg

    from scrape_contracts import settings

    home = settings.dagster_home()
    if str(home) in _INSTANCES:
        return _INSTANCES[str(home)]
    try:
        home.mkdir(parents=True, exist_ok=True)
        # resolved: Dagster refuses a relative DAGSTER_HOME
        os.environ["DAGSTER_HOME"] = str(home)
        return _INSTANCES.setdefault(str(home), dg.DagsterInstance.get())
    except (OSError, dg.DagsterError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"cannot open the Dagster instance in DAGSTER_HOME={home}: {first}; "
                       "set DAGSTER_HOME to a writable folder (the demo's is ./.dagster_home)") from None


def close_instances() -> None:
    """Dispose of the command's instance: the next ``main()`` (tests, embedding) opens its own."""
    for opened in _INSTANCES.values():
        opened.dispose()
    _INSTANCES.clear()


def store(*, existing: bool = False) -> ProjectStore:
    """The project store; ``existing``: refuse (one line naming the setting) rather than create an empty one."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.service.accepted import open_store

    if existing:
        return open_store()
    settings.dagster_home().mkdir(parents=True, exist_ok=True)
    return ProjectStore(settings.db_url())


def workspace_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no workspace file at {text}: pass the project's workspace.yaml")
    return text
