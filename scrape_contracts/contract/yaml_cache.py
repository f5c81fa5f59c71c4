"""Large contracts parsed once per content, not once per process.

Every process that loads the code location reads every contract: the CLI, the code server, and with
``--queue`` each ``dagster job launch`` and each run worker. PyYAML builds a node per value and then
constructs the data from the nodes in Python, seconds for a contract of tens of thousands of targets; reading
the same data back as JSON is many times quicker (docs/performance.md). A valid contract of at least
``MIN_BYTES`` is kept as JSON under the sha256 of its text (and of what else decides the parse: the loader's
format, PyYAML's version, the limits), in ``SCRAPE_CONTRACTS_CACHE_DIR`` (default
``$XDG_CACHE_HOME/scrape_contracts`` or ``~/.cache/scrape_contracts``; ``off`` turns it off), readable by its
owner only.

Only the YAML's data is kept: the contract is validated again on every load, so a new release's rules apply
to it. Only data JSON gives back as it was is kept (text keys; strings, numbers, booleans, nulls, lists,
mappings): a date or a set is parsed every time. Nothing is lost when the folder cannot be written (read-only
image, full disk): the document is parsed as before. JSON, not pickle: a file in the folder can at worst
be wrong data, which validation then refuses, never code.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from scrape_contracts.contract.safe_yaml import YamlLimits

MIN_BYTES = 64 * 1024  # smaller documents parse in a few milliseconds: not worth a file
MAX_FILES = 64  # the newest kept; each edit of a large contract leaves one more
_FORMAT = "1"  # raise when safe_yaml.load's output changes for the same text


def cache_dir() -> Path | None:
    """Where parsed documents are kept, or None when ``SCRAPE_CONTRACTS_CACHE_DIR=off``."""
    raw = os.environ.get("SCRAPE_CONTRACTS_CACHE_DIR", "").strip()
    if raw.lower() == "off":
        return None
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scrape_contracts"


def key_of(text: str, limits: YamlLimits) -> str:
    decided_by = f"{_FORMAT}\0{yaml.__version__}\0{limits.max_bytes}\0{limits.max_nodes}\0"
    return hashlib.sha256((decided_by + text).encode("utf-8")).hexdigest()


def read(text: str, limits: YamlLimits) -> Any | None:
    """The data kept for ``text``, or None (not kept, too small, unreadable: parse it)."""
    folder = cache_dir()
    if folder is None or len(text) < MIN_BYTES:
        return None
    path = folder / f"{key_of(text, limits)}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        os.utime(path)  # pruning keeps the newest used, not the newest written
    except (OSError, ValueError):
        return None
    return kept.get("data") if isinstance(kept, dict) else None


def keep(text: str, limits: YamlLimits, data: Any) -> None:
    """Keep ``data`` parsed from ``text`` when it is large enough and JSON gives it back as it is."""
    folder = cache_dir()
    if folder is None or len(text) < MIN_BYTES or not isinstance(data, dict) or not _plain(data):
        return
    path = folder / f"{key_of(text, limits)}.json"
    partial = folder / f".{path.name}.{os.getpid()}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # readable by its owner only, like the folder: it is a copy of the contract
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                       encoding="utf-8") as out:
            out.write(json.dumps({"data": data}, ensure_ascii=False))
        os.replace(partial, path)  # a reader sees the whole file or none
        _prune(folder)
    except (OSError, ValueError):  # ValueError: text JSON cannot write (a lone surrogate)
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass


def _prune(folder: Path) -> None:
    kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in kept[MAX_FILES:]:
        old.unlink(missing_ok=True)


def _plain(data: Any) -> bool:
    """Whether JSON gives ``data`` back equal and of the same types (no dates, sets, bytes, number keys;
    no NaN or infinity, which JSON has no words for)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if not all(type(k) is str for k in value):
                return False
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                return False
        elif value is not None and type(value) not in (str, int, bool):
            return False
    return True
