"""``scrape-contracts export odcs|data``: a contract as an ODCS data contract, its accepted records as a file."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from scrape_contracts.cli import common


def register(sub: Any) -> None:
    export = sub.add_parser("export", help="a contract as ODCS (for datacontract-cli), accepted data as a file"
                            ).add_subparsers(dest="export_command", required=True)
    p = export.add_parser("odcs", help="the contract as an ODCS v3 document; on a PostgreSQL store, also (re)make "
                                       "the view accepted.<contract> it describes")
    p.add_argument("contract")
    p.add_argument("--out", type=Path, help="write the YAML here (default: standard output)")
    p.add_argument("--no-view", action="store_true",
                   help="only the document: do not make the view in the PostgreSQL store")
    p.set_defaults(func=cmd_odcs)
    p = export.add_parser("data", help="the latest accepted records (or as of --at) as Parquet, CSV or JSON Lines")
    p.add_argument("contract")
    p.add_argument("--out", type=Path, required=True, help="the file to write")
    p.add_argument("--format", choices=["parquet", "csv", "jsonl"],
                   help="default: from the suffix of --out (.parquet, .csv, .jsonl)")
    p.add_argument("--partition", action="append", help="only this target (repeat for several)")
    p.add_argument("--at", type=_timestamp, help="the records accepted as of this time (ISO 8601 with a zone, "
                                                 "e.g. 2026-03-01T12:00:00Z)")
    p.set_defaults(func=cmd_data)


def _timestamp(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (e.g. 2026-03-01T12:00:00Z)") from None


def cmd_odcs(args: argparse.Namespace) -> int:
    import yaml

    from scrape_contracts import settings
    from scrape_contracts.contract.odcs import odcs_document
    from scrape_contracts.service.exports import odcs_export, server_of

    contract = common.contract(args, args.contract).contract
    url = settings.db_url()
    if server_of(url) is None or args.no_view:
        document, view = odcs_document(contract, server_of(url)), None
    else:
        document, view = odcs_export(contract, common.store(existing=True))
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=110)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote the ODCS document of {contract.name} to {args.out}")
    if view:
        print(f"made the view {view} in the project store (what the document's server describes)", file=sys.stderr)
    elif server_of(url) is None:
        print("the project store is SQLite: the document names no server (`datacontract test` needs the "
              "PostgreSQL store, SCRAPE_CONTRACTS_DB_URL)", file=sys.stderr)
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from scrape_contracts.service.exports import DataFormat, accepted_table, accepted_versions, write_table

    fmt = args.format or args.out.suffix.lstrip(".").lower()
    if fmt not in {f.value for f in DataFormat}:
        raise common.CliError(f"cannot tell the format from {args.out.name!r}: pass --format parquet, csv or jsonl")
    contract = common.contract(args, args.contract).contract
    store = common.store(existing=True)
    versions = accepted_versions(store, contract, partitions=args.partition, at=args.at)
    table = accepted_table(contract, versions, gone=store.gone_targets(contract.name))
    write_table(table, DataFormat(fmt), args.out)
    found = {v.partition for v in versions}
    print(f"wrote {table.num_rows} row(s) of {len(found)} target(s) of {contract.name} to {args.out} ({fmt})")
    missing = [p for p in args.partition or [] if p not in found]
    if missing:
        when = f" as of {args.at.isoformat()}" if args.at else ""
        print(f"no accepted data{when} for {', '.join(missing)} (check the partition keys: "
              f"`scrape-contracts targets list {contract.name}`)", file=sys.stderr)
    return 0
