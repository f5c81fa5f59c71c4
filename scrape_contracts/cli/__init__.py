"""``scrape-contracts``: validate contracts, run the demo, manage targets, review, read the event trail."""

# (the docstring above is the parser's description.) Here: the parser and ``main``; what every command shares is
# in ``common``; each command group registers itself from its own module.

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scrape_contracts.cli.common import CliError, Parser, close_instances


def build_parser() -> argparse.ArgumentParser:
    from scrape_contracts.cli import deliveries, export, project, review, runs, serve

    parser = Parser(prog="scrape-contracts", description=__doc__)
    parser.add_argument("--contracts-dir", default=None,
                        help="folder of contract YAML files (default: $SCRAPE_CONTRACTS_DIR or ./contracts)")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (project, runs, review, deliveries, export, serve):
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from sqlalchemy.exc import OperationalError

    from scrape_contracts.adapters.store import StoreError, shown_url
    from scrape_contracts.service.accepted import AcceptedDataError

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
        from scrape_contracts import settings

        first = str(exc.orig or exc).strip().splitlines()[0]
        print(f"error: cannot use the project store at {shown_url(settings.db_url())}: {first}; "
              "check SCRAPE_CONTRACTS_DB_URL (or DAGSTER_HOME)", file=sys.stderr)
        return 1
    finally:
        close_instances()


def console() -> None:
    """The ``scrape-contracts`` command."""
    sys.exit(main())


if __name__ == "__main__":
    console()
