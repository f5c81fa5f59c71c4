"""``python -m scrape_contracts.adapters.migrations revision "what changes"``: write the next migration.

Alembic compares a throw-away SQLite store at ``HEAD`` with ``adapters/schema.py`` and writes what differs
into ``versions/<next>_<what_changes>.py``. Read the file before committing it, then set ``HEAD``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa

from scrape_contracts.adapters import migrations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scrape_contracts.adapters.migrations")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("revision", help="write the next migration from the changes in adapters/schema.py")
    p.add_argument("message", help='what the migration does, e.g. "add the outbox"')
    args = parser.parse_args(argv)

    from alembic import command

    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(f"sqlite:///{Path(tmp) / 'head.db'}")
        try:
            migrations.upgrade(engine, "a throw-away store")
            with engine.begin() as conn:
                script = command.revision(migrations._config(conn), message=args.message, autogenerate=True,
                                          rev_id=f"{int(migrations.HEAD) + 1:04d}")
        finally:
            engine.dispose()
    path = getattr(script, "path", None)
    print(f"wrote {path}: read it, then set HEAD = {getattr(script, 'revision', '?')!r} in "
          f"{Path(migrations.__file__)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
