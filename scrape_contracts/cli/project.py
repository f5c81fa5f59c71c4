"""``scrape-contracts validate``, ``demo``, ``dev`` and ``db``: the project, its instance and its store."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from scrape_contracts.cli.common import (
    LOCAL_INSTANCE_YAML,
    REPO_ROOT,
    CliError,
    load,
    workspace_file,
)


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="load every contract and report each mistake (exit 1 if any)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("demo", help="offline demo: scrape, heal and quarantine on the example site")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dev", help="the Dagster UI and daemon on the demo's instance (or DAGSTER_HOME's), "
                                   "in one command")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--workspace", type=workspace_file, default=str(REPO_ROOT / "workspace.yaml"))
    p.set_defaults(func=cmd_dev)

    db = sub.add_parser("db", help="the project store's schema: current revision, upgrade").add_subparsers(
        dest="db_command", required=True)
    p = db.add_parser("current", help="print the store's schema revision (changes nothing)")
    p.set_defaults(func=cmd_db_current)
    p = db.add_parser("upgrade", help="upgrade the store's schema now (run once before rolling out a release; "
                                      "opening the store does it too)")
    p.set_defaults(func=cmd_db_upgrade)


def cmd_validate(args: argparse.Namespace) -> int:
    result = load(args)
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
    import sqlalchemy as sa

    from scrape_contracts import settings
    from scrape_contracts.adapters.store import schema_state, shown_url

    url = settings.db_url()
    database = sa.engine.make_url(url).database
    if url.startswith("sqlite") and database not in (None, "", ":memory:") and not Path(database).is_file():
        raise CliError(f"no project store at {shown_url(url)} (the file does not exist): check DAGSTER_HOME or "
                       "SCRAPE_CONTRACTS_DB_URL")
    print(f"{shown_url(url)}: schema revision {schema_state(url).describe()}")
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Bring the project store's schema to this release's newest revision (what opening it does anyway)."""
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import shown_url, upgrade_schema

    url = settings.db_url()
    if url.startswith("sqlite"):
        settings.dagster_home().mkdir(parents=True, exist_ok=True)
    before, after = upgrade_schema(url)
    if before == after:
        print(f"{shown_url(url)}: already at schema revision {after} (head)")
    else:
        print(f"{shown_url(url)}: upgraded the schema from {before or 'an empty database'} to {after} (head)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from scrape_contracts.cli.demo import run_demo

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
    # the dev server in this process's place: Ctrl-C and signals reach it as if it had been started by hand.
    # In DAGSTER_HOME, not the folder this command was run from: `dagster dev` warns about a dagster.yaml in
    # its working folder that is not DAGSTER_HOME's, and Dagster starts each of its processes as
    # `python -m ...`, which imports from the working folder before the installed packages. Whoever can write
    # DAGSTER_HOME controls the instance already (its dagster.yaml names the classes Dagster imports); a
    # module left in the folder dev was started from (a shared /tmp, a download folder) is never imported.
    os.chdir(home)
    os.execve(str(dagster), command, env)
    return 0  # pragma: no cover - execve does not return
