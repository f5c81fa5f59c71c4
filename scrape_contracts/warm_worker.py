"""The warm process run workers fork from (see ``scrape_contracts/warm_launcher.py``).

Started by the launcher as ``python -m scrape_contracts.warm_worker``, it imports Dagster, the libraries and
this package once, then reads one request per line on stdin (a run id and the instance to run it on),
forks, and answers with the child's pid on stdout. The child executes the run exactly as
``dagster api execute_run`` would; only the Python start and the imports are skipped (about 2 s of a run's
start on this machine). The code location (``scrape_contracts.definitions``: every contract parsed and
turned into Dagster definitions, about 0.3 s for a 2,000-target contract) is loaded here too, with a
snapshot of the contracts folder (every file's size and mtime): a run whose folder still matches it uses
it, any other run loads its contracts from disk, so an edited contract is what the next run scrapes; this
process reloads after such a change, between requests. It stays single-threaded, so forking it is safe;
when its stdin closes (the launcher's process ended) it exits, and runs in flight keep running.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from typing import Any

# what every run worker imports anyway; scrape_contracts.definitions (which reads the contracts) is not here
PRELOAD = (
    "dagster",
    "dagster._cli.api",
    "dagster._core.execution.api",
    "scrape_contracts.defs",
    "scrape_contracts.defs.batch",
    "scrape_contracts.service.batch",
    "scrape_contracts.adapters.fetch",
    "lxml.html",
    "jsonschema",
)


CODE_LOCATION = "scrape_contracts.definitions"
_MAX_SNAPSHOT_FILES = 5000  # a folder holding more (fixture pages, say) is not worth watching: load per run


def contracts_snapshot() -> tuple | None:
    """What the code location is built from: the settings, and every file under the contracts folder with its
    size, mtime, ctime and inode (a copy that keeps size and mtime still changes the ctime). None when it
    cannot be told."""
    from scrape_contracts.contract.loader import contracts_dir

    root = contracts_dir().resolve()
    files = []
    try:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                stat = os.stat(os.path.join(folder, name))
                files.append((folder, name, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino))
                if len(files) > _MAX_SNAPSHOT_FILES:
                    return None
    except OSError:
        return None
    # what the definitions are built from; not every DAGSTER_* variable (`dagster dev` gives the daemon two that
    # a shell never has, and no served command would then match)
    settings = tuple(sorted((k, v) for k, v in os.environ.items()
                            if k.startswith("SCRAPE_CONTRACTS_") or k == "DAGSTER_HOME"))
    return str(root), tuple(sorted(files)), settings


_attempted: tuple | None = None  # the folder as it was at the last preload
_preloaded: tuple | None = None  # the same, when that preload succeeded


def preload_code_location() -> None:
    """Load the code location now, so forked runs skip it; a folder that does not load is left to the runs."""
    global _attempted, _preloaded
    from scrape_contracts.contract import loader

    _preloaded = None
    sys.modules.pop(CODE_LOCATION, None)
    loader.forget_parsed()  # a file changed: parse every one again (its parse is keyed by stat, not content)
    _attempted = contracts_snapshot()
    if _attempted is None:
        return
    try:
        importlib.import_module(CODE_LOCATION)
    except Exception:  # noqa: BLE001 (no contracts, a broken one: each run reports it in its own log)
        sys.modules.pop(CODE_LOCATION, None)
        return
    _preloaded = _attempted


def _forget_stale_code_location() -> None:
    """In the child, after its chdir: drop the preloaded code location unless the folder still matches."""
    if _preloaded is not None and contracts_snapshot() == _preloaded:
        return
    from scrape_contracts.contract import loader

    sys.modules.pop(CODE_LOCATION, None)
    loader.forget_parsed()


def preload_instance_modules() -> None:
    """Open and close the instance of DAGSTER_HOME once: its storage classes and what they import (about 250
    modules, 0.3 s of every run's start) are loaded here. Nothing stays open: no connection, no thread."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return
    try:
        from dagster import DagsterInstance
        from dagster._core.instance import InstanceRef

        with DagsterInstance.from_ref(InstanceRef.from_dir(home)):
            pass
    except Exception:  # noqa: BLE001 (a run opens its own instance and reports what is wrong with it)
        pass


def _run(request: dict[str, str]) -> int:
    """In the forked child: execute one run (what ``dagster api execute_run`` does after its imports)."""
    from dagster._cli.api import _execute_run_command_body  # private in 1.13 (pinned)
    from dagster._core.instance import DagsterInstance, InstanceRef
    from dagster._serdes import deserialize_value
    from dagster._utils.interrupts import capture_interrupts

    with capture_interrupts():
        ref = deserialize_value(request["instance_ref"], InstanceRef)
        with DagsterInstance.from_ref(ref) as instance:
            # Dagster's PostgreSQL storages open a new connection (a new server process) for every event the
            # run writes: 23.5 ms per event against 8 ms on a held one (helper A/B, 60 events x 5). The run's
            # process holds a small pool instead, as Dagster's webserver does (one per storage, up to 10 more
            # while threads need them), closed when the run ends; SQLite: nothing changes
            instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=10)
            return _execute_run_command_body(request["run_id"], instance, lambda _event: None,
                                             set_exit_code_on_failure=False)


def _child(request: dict[str, str]) -> None:
    _drop_listener()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run's own subprocesses must be waitable
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stdout is the launcher's answer pipe: the run prints to stderr like a spawned worker
    code = 1
    try:
        if request.get("cwd"):
            os.chdir(request["cwd"])
        _forget_stale_code_location()
        if request.get("batch"):
            # a batched run: fork its workers now, while this process still has one thread
            from scrape_contracts import settings
            from scrape_contracts.service.prefork import prefork_workers

            if settings.parse_workers() > 0:
                prefork_workers(settings.parse_workers())
        code = _run(request)
    except BaseException:  # noqa: BLE001 (the run's failure is in its event log; this is for the daemon's log)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ---- scrape-contracts run, served (scrape_contracts/warm_cli.py) ------------------------------------------------
_listener = None  # warm_cli.Listener while this process serves commands
_source = None  # this package's source fingerprint when this process started


def _drop_listener() -> None:
    """In a child: close the inherited listening socket (a run outliving this process must not hold it)."""
    if _listener is not None:
        _listener.sock.close()


def _code_changed() -> str | None:
    from scrape_contracts.warm_launcher import _package_root, source_fingerprint

    if source_fingerprint([_package_root()]) != _source:
        return "this package's source changed since the warm process started"
    return None


def _prepare_command() -> None:
    """In a command's child, with the client's environment: the preloaded code location may serve the command
    only while the contracts folder (as the command sees it, ``--contracts-dir`` included) still matches."""
    from scrape_contracts import launch

    launch.preloaded_current = lambda module: (module == CODE_LOCATION and _preloaded is not None
                                               and contracts_snapshot() == _preloaded)


def _run_command(argv: list[str]) -> int:
    from scrape_contracts import cli

    return cli.main(argv)


def _command_child(conn: Any) -> None:
    from scrape_contracts import warm_cli

    _drop_listener()
    # a session of its own: Ctrl-C or Ctrl-Z in the daemon's terminal must not reach a command of another one
    os.setsid()
    warm_cli.serve(conn, _code_changed, _prepare_command, _run_command)


_LISTENER_CHECK_S = 30.0


def _reopen_listener() -> Any:
    global _listener
    from scrape_contracts import warm_cli

    _listener = warm_cli.Listener.open()
    return _listener


def _requests(listener: Any) -> Iterator[Any]:
    """The launcher's requests (one JSON line each on stdin) and, when serving, connections of commands, as
    they come; ends when stdin closes."""
    import selectors

    chooser = selectors.DefaultSelector()
    chooser.register(0, selectors.EVENT_READ, "launcher")
    if listener is not None:
        chooser.register(listener.fileno(), selectors.EVENT_READ, "command")
    pending = b""
    while True:
        ready = chooser.select(timeout=_LISTENER_CHECK_S)
        if not ready and listener is not None and listener.gone():
            # its socket file was removed (a /tmp cleaner): listen again, else every command would run locally
            chooser.unregister(listener.fileno())
            listener.close()
            listener = _reopen_listener()
            if listener is not None:
                chooser.register(listener.fileno(), selectors.EVENT_READ, "command")
        for key, _events in ready:
            if key.data == "command":
                conn = listener.accept()
                if conn is not None:
                    yield conn
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)


def _in_child(body: Any, argument: Any) -> None:
    """A forked child's life: whatever happens in it, it never returns into this process's loop."""
    try:
        body(argument)
    finally:
        os._exit(1)


def main() -> int:
    global _listener, _source
    from scrape_contracts import warm_cli
    from scrape_contracts.warm_launcher import _package_root, source_fingerprint

    _source = source_fingerprint([_package_root()])
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part is missing: the run imports what it needs itself
            pass
    preload_instance_modules()
    preload_code_location()
    # what is loaded now lives as long as the process: out of the collector's sight (gc.freeze, meant for
    # pre-fork servers), else every full collection in every run worker walks Dagster's whole import graph,
    # and writing the collector's marks would copy the shared pages into each fork
    gc.collect()
    gc.freeze()
    # children are reaped by the kernel: this process never waits for them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _listener = warm_cli.Listener.open()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    try:
        for request in _requests(_listener):
            if isinstance(request, dict):
                pid = os.fork()
                if pid == 0:
                    _in_child(_child, request)
                out.write(f"{pid}\n")
                out.flush()
            else:  # a command's connection: a child of its own answers it
                if os.fork() == 0:
                    _in_child(_command_child, request)
                request.close()
            if contracts_snapshot() != _attempted:
                gc.unfreeze()  # what the old code location froze can go now
                preload_code_location()  # the contracts changed: the next run starts from them
                gc.collect()
                gc.freeze()
    finally:
        if _listener is not None:
            _listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
