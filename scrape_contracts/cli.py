"""``scrape-contracts``: validate contracts, run the demo, manage targets, review, read the event trail."""

# (the docstring above is the parser's description.) Here: the parser, ``main`` and what every command shares
# (the instance, the store, one-line errors); the commands are in ``cli_runs`` (targets, run, reextract),
# ``cli_review`` (review, pause, resume, events, selectors), ``cli_deliveries`` and ``cli_frontdoor`` (tokens,
# serve, mcp). Heavy packages (dagster, the definitions) are imported inside the commands that need them, so
# that ``--help`` and ``validate`` stay fast.

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrape_contracts.contract.loader import LoadResult

REPO_ROOT = Path(__file__).resolve().parents[1]
# the laptop instance config; demo and dev copy it into DAGSTER_HOME (Dagster reads it only there)
LOCAL_INSTANCE_YAML = REPO_ROOT / "dagster.yaml"


class CliError(Exception):
    """A mistake the user can fix: printed as one ``error:`` line, exit status ``code``, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default prints the whole usage first; one line and where to look is enough
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _load(args: argparse.Namespace) -> LoadResult:
    # imported here: the contract model costs 0.6 s to import, which a command served by the warm process
    # (see ``console``) never needs in this process
    from scrape_contracts.contract.loader import load_contracts

    return load_contracts(args.contracts_dir)


def _contract(args: argparse.Namespace, name: str):  # -> LoadedContract
    result = _load(args)
    loaded = result.by_name().get(name)
    if loaded is None:
        known = ", ".join(sorted(result.by_name())) or "none"
        raise CliError(f"no valid contract named {name!r} (valid contracts: {known}); "
                       "run `scrape-contracts validate` to see load errors")
    return loaded


def cmd_validate(args: argparse.Namespace) -> int:
    result = _load(args)
    for loaded in result.contracts:
        contract = loaded.contract
        kind = "dynamic" if contract.is_dynamic else f"{len(contract.static_targets)} targets"
        print(f"ok     {loaded.path}: contract {contract.name!r} ({kind}, {len(contract.fields)} fields)")
    for error in result.errors:
        print(f"error  {error}")
    print(f"{len(result.contracts)} valid contract(s), {len(result.errors)} error(s)")
    return 1 if result.errors else 0


def cmd_db_current(args: argparse.Namespace) -> int:
    """The schema revision of the project store, changing nothing."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import schema_state
    from scrape_contracts.reader import _shown

    import sqlalchemy as sa

    url = settings.db_url()
    database = sa.engine.make_url(url).database
    if url.startswith("sqlite") and database not in (None, "", ":memory:") and not Path(database).is_file():
        raise CliError(f"no project store at {_shown(url)} (the file does not exist): check DAGSTER_HOME or "
                       "SCRAPE_CONTRACTS_DB_URL")
    print(f"{_shown(url)}: schema revision {schema_state(url).describe()}")
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Bring the project store's schema to this release's newest revision (what opening it does anyway)."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import upgrade_schema
    from scrape_contracts.reader import _shown

    url = settings.db_url()
    if url.startswith("sqlite"):
        settings.dagster_home().mkdir(parents=True, exist_ok=True)
    before, after = upgrade_schema(url)
    if before == after:
        print(f"{_shown(url)}: already at schema revision {after} (head)")
    else:
        print(f"{_shown(url)}: upgraded the schema from {before or 'an empty database'} to {after} (head)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from scrape_contracts.demo import run_demo

    home_set = bool(os.environ.get("DAGSTER_HOME"))
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    if not home_set:
        # the demo's own instance: start clean so every run of the demo tells the same story
        shutil.rmtree(home, ignore_errors=True)
        os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(LOCAL_INSTANCE_YAML, home / "dagster.yaml")
    return run_demo(home)


def cmd_dev(args: argparse.Namespace) -> int:
    """``dagster dev`` (the webserver and the daemon) on the instance in DAGSTER_HOME, the demo's by default."""
    from scrape_contracts import settings

    home = settings.dagster_home()
    if not (home / "scrape_contracts.db").exists() and not os.environ.get("SCRAPE_CONTRACTS_DB_URL"):
        told = f"DAGSTER_HOME={home}" if os.environ.get("DAGSTER_HOME") else \
            f"DAGSTER_HOME is not set, so ./.dagster_home of {os.getcwd()} was used"
        raise CliError(f"nothing has been scraped into this instance ({told}): run `scrape-contracts demo` "
                       "here first, or set DAGSTER_HOME to your instance folder")
    if not (home / "dagster.yaml").exists():
        shutil.copy(LOCAL_INSTANCE_YAML, home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    # `dagster dev` opens with a warning that `dg dev` supersedes it (a CLI this project does not install)
    superseded = "ignore:Function `dev_command` is superseded"
    env["PYTHONWARNINGS"] = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), superseded) if w)
    if args.contracts_dir:
        env["SCRAPE_CONTRACTS_DIR"] = str(Path(args.contracts_dir).resolve())
    print(f"Dagster UI on http://{args.host}:{args.port} for DAGSTER_HOME={home} (webserver and daemon; "
          "Ctrl-C stops both)", flush=True)
    dagster = Path(sys.executable).parent / "dagster"
    command = [str(dagster), "dev", "-w", str(Path(args.workspace).resolve()), "-h", args.host,
               "-p", str(args.port)]
    # the dev server in this process's place: Ctrl-C and signals reach it as if it had been started by hand
    os.chdir(home)  # `dagster dev` warns about a dagster.yaml in its working folder that is not DAGSTER_HOME's
    os.execve(str(dagster), command, env)
    return 0  # pragma: no cover - execve does not return


_INSTANCES: dict[str, Any] = {}


def _instance():
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


def _store(*, existing: bool = False):
    """The project store; ``existing``: refuse (one line naming the setting) rather than create an empty one."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.reader import open_store

    if existing:
        return open_store()
    settings.dagster_home().mkdir(parents=True, exist_ok=True)
    return ProjectStore(settings.db_url())


def _workspace_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no workspace file at {text}: pass the project's workspace.yaml")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scrape-contracts", description=__doc__)
    parser.add_argument("--contracts-dir", default=None,
                        help="folder of contract YAML files (default: $SCRAPE_CONTRACTS_DIR or ./contracts)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="load every contract and report each mistake (exit 1 if any)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("demo", help="offline demo: scrape, heal and quarantine on the example site")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dev", help="the Dagster UI and daemon on the demo's instance (or DAGSTER_HOME's), "
                                   "in one command")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--workspace", type=_workspace_file, default=str(REPO_ROOT / "workspace.yaml"))
    p.set_defaults(func=cmd_dev)

    from scrape_contracts import cli_deliveries, cli_frontdoor, cli_review, cli_runs

    cli_runs.register(sub)
    cli_review.register(sub)
    cli_deliveries.register(sub)
    cli_frontdoor.register(sub)

    db = sub.add_parser("db", help="the project store's schema: current revision, upgrade").add_subparsers(
        dest="db_command", required=True)
    p = db.add_parser("current", help="print the store's schema revision (changes nothing)")
    p.set_defaults(func=cmd_db_current)
    p = db.add_parser("upgrade", help="upgrade the store's schema now (run once before rolling out a release; "
                                      "opening the store does it too)")
    p.set_defaults(func=cmd_db_upgrade)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sqlalchemy.exc import OperationalError

    from scrape_contracts.adapters.store import StoreError
    from scrape_contracts.reader import AcceptedDataError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except (AcceptedDataError, StoreError, ValueError) as exc:
        # the store's refusals and the settings' checks are written for the user; a traceback adds nothing
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OperationalError as exc:
        from scrape_contracts.reader import _shown
        from scrape_contracts import settings

        first = str(exc.orig or exc).strip().splitlines()[0]
        print(f"error: cannot use the project store at {_shown(settings.db_url())}: {first}; "
              "check SCRAPE_CONTRACTS_DB_URL (or DAGSTER_HOME)", file=sys.stderr)
        return 1
    finally:
        for instance in _INSTANCES.values():
            instance.dispose()
        _INSTANCES.clear()  # one command's instance: the next main() (tests, embedding) opens its own


def console() -> None:
    """The ``scrape-contracts`` command: ``main()``, then an exit that skips tearing the interpreter down.

    Freeing the objects Dagster leaves behind took 0.5–2 s after the last line was printed, a large part of
    a short command such as ``run --wait`` on an unchanged sweep. Exit handlers still run and non-daemon
    threads are waited for; only the teardown of modules and objects is skipped, as ``os._exit`` does.
    """
    import atexit
    import threading

    from scrape_contracts import warm_cli

    # `run` and `reextract` go to the daemon's warm process when one serves this instance: it has Dagster and
    # the contracts loaded (see warm_cli); else, or when it declines, the command runs here
    served = warm_cli.try_warm(sys.argv[1:])
    if served is not None:
        sys.stdout.flush()
        os._exit(served)
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)  # a profiler or debugger writes its results in the teardown
    threading._shutdown()  # what the interpreter does first at exit: thread pools' hooks, non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # `| head` closed it: what it wanted was written
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
