"""``scrape-contracts``: validate contracts, run the demo, manage targets, review, read the event trail."""

# (the docstring above is the parser's description.) Here: the parser and ``main``; what every command shares is
# in ``common``; each command group registers itself from its own module.

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from scrape_contracts.cli.common import CliError, Parser, close_instances


def build_parser() -> argparse.ArgumentParser:
    from scrape_contracts.cli import deliveries, export, project, recovery, review, runs, serve

    parser = Parser(prog="scrape-contracts", description=__doc__)
    parser.add_argument("--contracts-dir", default=None,
                        help="folder of contract YAML files (default: $SCRAPE_CONTRACTS_DIR or ./contracts)")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (project, runs, review, recovery, deliveries, export, serve):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from scrape_contracts.adapters.store.outages import failing_at_once

    args = build_parser().parse_args(argv)
    with failing_at_once():  # a command says a database gone at once; workers and runs wait (outages.py)
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    from scrape_contracts.adapters.store import StoreError
    from scrape_contracts.service.accepted import AcceptedDataError
    from scrape_contracts.cli.common import WithoutEventLogFailures, unreachable

    logging.getLogger().addFilter(_quiet_database_retries)
    stderr, sys.stderr = sys.stderr, WithoutEventLogFailures(sys.stderr)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except (AcceptedDataError, StoreError, ValueError) as exc:
        # the store's refusals and the settings' checks are written for the user; a traceback adds nothing
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        # a database that stopped or cannot be reached, from any command, at any point: one line naming the
        # setting; anything else is a bug, and its traceback is what a bug report needs
        message = unreachable(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    finally:
        sys.stderr = stderr
        logging.getLogger().removeFilter(_quiet_database_retries)
        close_instances()


def _quiet_database_retries(record: logging.LogRecord) -> bool:
    # Dagster's PostgreSQL storage logs each retry of a connection with the driver's whole message (six
    # multi-line warnings before it gives up); the command says it in one line once it has given up
    return "dagster_postgres" not in record.pathname


def console() -> None:
    """The ``scrape-contracts`` command."""
    leave(main())


def leave(code: int) -> None:
    """End the command with ``code``, skipping only the interpreter's teardown.

    Python's own exit frees every object the command made, one by one (Dagster's, the contract's, the
    runs'): a few tenths of a second after a sweep's summary is printed, during which the command has not
    ended (docs/performance.md, Politeness). Here the threads still working are waited for and the exit
    handlers run (logging's, multiprocessing's), as at an ordinary exit; then the output is flushed and the
    process ends without the teardown, as ``os._exit`` does."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # the handlers an ordinary exit would run (there is no public name for this)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # `| head` closed it, or it is closed: what was wanted was written
            pass
    os._exit(code)


if __name__ == "__main__":
    console()
