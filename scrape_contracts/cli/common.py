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


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Text from the store or the trail as a terminal should show it: control characters (ESC, NUL, CR, ...)
    escaped as ``\\x1b`` etc., so a pause reason cannot move the cursor, recolour or erase the screen."""
    return text if text.isprintable() else "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char.isprintable():
        return char
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def unreachable(exc: BaseException) -> str | None:
    """One line for a database a command could not use (stopped, unreachable, refused), naming the setting
    that points at it; None when ``exc`` is something else. Dagster's PostgreSQL storage wraps the driver's
    error in its own; a frame of Dagster's code in the chain says the instance's storage failed."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    from scrape_contracts import settings
    from scrape_contracts.adapters.store import shown_url

    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    database = [e for e in chain if isinstance(e, OperationalError) or _is_driver_error(e)
                or type(e).__name__ == "DagsterPostgresException"]
    if not database:
        return None
    root = next((e for e in reversed(chain) if str(e).strip()), database[-1])
    reason = root.orig if isinstance(root, DBAPIError) and root.orig is not None else root
    first = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else type(reason).__name__
    # what was committed before it stopped is kept (a batch commits chunk by chunk): again is safe
    again = "then run the command again (what it recorded before is kept)"
    if any(_from_dagster(e) for e in chain):
        return (f"cannot use the Dagster instance's storage (DAGSTER_HOME={settings.dagster_home()}, its "
                f"dagster.yaml): {first}; check that the database is running and the storage settings there, "
                f"{again}")
    return (f"cannot use the project store at {shown_url(settings.db_url())}: {first}; "
            f"check SCRAPE_CONTRACTS_DB_URL (or DAGSTER_HOME), {again}")


class WithoutEventLogFailures:
    """stderr without Dagster's report of a log line it could not write to its event log because its
    database is gone: Dagster writes the driver's whole message there (several lines, with the SQL) for every
    such line, straight to ``sys.stderr``; the command says the same in one line when it ends. Anything else,
    and that report for any other cause, passes through."""

    _PREFIX = "Exception while writing logger call to event log: "
    # psycopg2's OperationalError (refused, reset) and InterfaceError ("connection already closed": the
    # pool's connection died with the server), and Dagster's own give-up after its retries
    _DATABASE_GONE = ("OperationalError", "InterfaceError", "too many retries for DB connection")

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith(self._PREFIX) and any(mark in text for mark in self._DATABASE_GONE):
            return len(text)
        return self._stream.write(text)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _is_driver_error(exc: BaseException) -> bool:
    # psycopg2's OperationalError and InterfaceError, without importing a driver the install may not have
    return type(exc).__module__.startswith("psycopg") and type(exc).__name__ in ("OperationalError",
                                                                                 "InterfaceError")


def _from_dagster(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith(("dagster.", "dagster_postgres")):
            return True
        tb = tb.tb_next
    return False


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
