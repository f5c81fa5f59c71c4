"""Migrations are history: once merged, a revision's id and its file never change, and no id is reused.

A store records only the id of the last revision it ran. When a merged migration is edited, renumbered or
its id given to another one, stores migrated before say "at head" while their schema differs (a store at
"0007" without sc_fingerprints was the result once). ``migration_revisions.json`` holds each revision's file
and sha256; a new migration is added to it when it is merged, and nothing in it ever changes after that.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from scrape_contracts.adapters import migrations

TABLE = Path(__file__).with_name("migration_revisions.json")
VERSIONS = migrations.HERE / "versions"
_ASSIGNMENT = r"^{name} = ['\"]([^'\"]*)['\"]"


def _files() -> dict[str, tuple[str, str, str | None]]:
    """revision id → (file name, sha256, down_revision) of every migration file."""
    found: dict[str, tuple[str, str, str | None]] = {}
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        text = path.read_bytes()
        revision = re.search(_ASSIGNMENT.format(name="revision").encode(), text, re.M)
        down = re.search(_ASSIGNMENT.format(name="down_revision").encode(), text, re.M)
        assert revision is not None, f"{path.name}: no `revision = '...'` line"
        rev = revision.group(1).decode()
        assert rev not in found, f"revision id {rev!r} used by {found[rev][0]} and {path.name}"
        found[rev] = (path.name, hashlib.sha256(text).hexdigest(), down.group(1).decode() if down else None)
    return found


def test_every_merged_migration_keeps_its_id_and_its_content() -> None:
    recorded = json.loads(TABLE.read_text())
    files = _files()
    for revision, entry in recorded.items():
        assert revision in files, (f"revision {revision!r} ({entry['file']}) is gone or has another id: a merged "
                                   "migration is never removed or renumbered (write a new one instead)")
        name, sha, _ = files[revision]
        assert (name, sha) == (entry["file"], entry["sha256"]), (
            f"{name} (revision {revision!r}) changed after it was merged: stores that ran it keep the old "
            "schema and say they are at head. Revert it and put the change in a new migration")
    new = sorted(set(files) - set(recorded))
    assert not new, (f"migration(s) {new} not in {TABLE.name}: add each one's file and sha256 when it is merged "
                     "(and never change either afterwards)")


def test_no_revision_id_is_reused_and_new_ids_name_their_file() -> None:
    files = _files()
    # ids an intermediate commit gave a migration that its merge renumbered: taken for ever
    assert not set(migrations.RENUMBERED) & set(files), "a renumbered revision id is used again"
    assert all(target in files for target in migrations.RENUMBERED.values())
    for revision, (name, _, _) in files.items():
        if len(revision) > 4:  # the ids from 0008 on are "<number>_<slug>", the file's own name
            assert name == f"{revision}.py", f"{name}: its revision id is {revision!r}"
