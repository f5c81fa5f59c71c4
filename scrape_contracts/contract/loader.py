"""Load every contract in a directory; report each mistake with file, field and line.

A broken contract does not take the others down: ``load_contracts`` returns the valid contracts and a list
of ``ContractError``s, and callers decide (Definitions show them in the UI and fail only when no contract
loads, see ``defs/load_report.py``; ``validate`` exits non-zero).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scrape_contracts import settings
from scrape_contracts.contract import destinations, safe_yaml, yaml_cache
from scrape_contracts.contract.model import Contract

DEFAULT_CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "contracts"
# files beside the contracts that are not contracts (destinations: contract/destinations.py)
NOT_CONTRACTS = frozenset({"destinations.yaml"})


@dataclass(frozen=True)
class ContractError:
    file: str
    field: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


@dataclass(frozen=True)
class LoadedContract:
    contract: Contract
    path: Path

    @property
    def base_dir(self) -> Path:
        return self.path.parent


@dataclass
class LoadResult:
    contracts: list[LoadedContract] = field(default_factory=list)
    errors: list[ContractError] = field(default_factory=list)
    directory: Path | None = None  # the folder they were read from

    def by_name(self) -> dict[str, LoadedContract]:
        return {c.contract.name: c for c in self.contracts}


def contracts_dir() -> Path:
    return Path(os.environ.get("SCRAPE_CONTRACTS_DIR") or DEFAULT_CONTRACTS_DIR)


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """1-based line of the YAML node at ``loc`` (deepest existing ancestor when the key is missing)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            if match is None:  # unknown key: point at the key itself when present
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key.start_mark.line + 1 if key is not None else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            continue  # pydantic union tags ("list[Target]") have no YAML counterpart
        line = node.start_mark.line + 1
    return line


_UNION_TAGS = ("function-after", "function-before", "DynamicTargets")


def _readable_loc(loc: Sequence[Any]) -> str:
    parts: list[str] = []
    for part in loc:
        text = str(part)
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        elif "[" in text or text in _UNION_TAGS or text == "list":  # not a field such as "listings"
            continue  # union / validator tags pydantic adds to the location
        else:
            parts.append(text)
    return ".".join(parts)


def _messages(exc: ValidationError, node: yaml.Node | None, file: str) -> list[ContractError]:
    errors: list[ContractError] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = err["loc"]
        # targets is a union (list or {dynamic: true}); report the branch the user meant, once
        if loc and loc[0] == "targets" and len(loc) > 1 and str(loc[1]) == "DynamicTargets":
            raw = node and next((v for k, v in node.value if k.value == "targets"), None)
            if not isinstance(raw, yaml.MappingNode):
                continue
        if loc and loc[0] == "targets" and len(loc) > 1 and str(loc[1]).startswith("list"):
            raw = node and next((v for k, v in node.value if k.value == "targets"), None)
            if isinstance(raw, yaml.MappingNode):
                continue
        where = _readable_loc(loc)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see the contract format in docs/contracts.md)"
        elif err["type"] == "missing":
            message = "required field is missing"
        if (where, message) in seen:
            continue
        seen.add((where, message))
        errors.append(ContractError(file, where, message, _line_of(node, loc)))
    return errors


# (path, mtime, ctime, inode, size, settings) -> what load_contract_file gave: one command loads the same files more than
# once (the CLI, then the in-process workspace): a 2,000-target contract took 0.4 s to parse each time
_PARSED: dict[tuple[Any, ...], tuple[Contract | None, list[ContractError]]] = {}


def forget_parsed() -> None:
    """Drop the parsed files: the next load reads every file again (a targets file may have changed)."""
    _PARSED.clear()


def load_contract_file(path: Path) -> tuple[Contract | None, list[ContractError]]:
    try:
        stat = path.stat()
    except OSError:
        return _load_contract_file(path)
    # validation reads settings (allowed roots, limits): the same file under other settings is another load;
    # where the folder was named from does not change it (the CLI sets SCRAPE_CONTRACTS_DIR between loads)
    environment = tuple(sorted((k, v) for k, v in os.environ.items()
                               if k.startswith("SCRAPE_CONTRACTS_") and k != "SCRAPE_CONTRACTS_DIR"))
    # ctime too: a copy that keeps size and mtime (rsync -a, cp -p) still changes it
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_size, environment)
    if key not in _PARSED:
        if len(_PARSED) > 256:
            _PARSED.clear()
        _PARSED[key] = _load_contract_file(path)
    contract, errors = _PARSED[key]
    return contract, list(errors)


def _load_contract_file(path: Path) -> tuple[Contract | None, list[ContractError]]:
    file = str(path)
    limits = settings.yaml_limits()
    try:
        text = safe_yaml.read_text(path, limits)
        cached = yaml_cache.read(text, limits)
        if cached is not None:
            data, node = cached, None
        else:
            data, node = safe_yaml.load(text, limits)
    except (OSError, UnicodeDecodeError) as exc:
        return None, [ContractError(file, "", f"cannot read file: {exc}")]
    except safe_yaml.YamlLimitError as exc:
        return None, [ContractError(file, "", f"refused: {exc.problem}", exc.line)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [ContractError(file, "", f"invalid YAML: {problem}", mark.line + 1 if mark else None)]
    if not isinstance(data, dict):
        return None, [ContractError(file, "", "a contract must be a YAML mapping (name:, targets:, fields: ...)")]
    try:
        # the folder confines the local paths a contract may name (fixture_dir, targets.file)
        contract = Contract.model_validate(data, context={"contract_dir": path.parent})
    except ValidationError as exc:
        if cached is not None:  # the data came from the cache: the mistakes' lines are in the text's nodes
            node = safe_yaml.compose(text, limits)
        return None, _messages(exc, node, file)
    if cached is None:  # only a valid contract: a refused one may hold what must not be copied (a password)
        yaml_cache.keep(text, limits, data)
    return contract, []


def load_contracts(directory: Path | str | None = None) -> LoadResult:
    """Every ``*.yaml``/``*.yml`` in ``directory`` (default ``SCRAPE_CONTRACTS_DIR`` or ``contracts/``)."""
    root = Path(directory) if directory is not None else contracts_dir()
    result = LoadResult(directory=root)
    if not root.is_dir():
        result.errors.append(ContractError(str(root), "", "contracts directory does not exist "
                                           "(set SCRAPE_CONTRACTS_DIR to the folder holding your *.yaml contracts)"))
        return result
    first_file: dict[str, Path] = {}
    for path in sorted([*root.glob("*.yaml"), *root.glob("*.yml")]):
        if path.name in NOT_CONTRACTS:
            continue
        contract, errors = load_contract_file(path)
        result.errors.extend(errors)
        if contract is None:
            continue
        if contract.name in first_file:
            result.errors.append(ContractError(
                str(path), "name",
                f"duplicate contract name {contract.name!r} (already defined in {first_file[contract.name]}); "
                "contract names must be unique", _line_of(safe_yaml.compose(path.read_text()), ["name"]),
            ))
            continue
        first_file[contract.name] = path
        result.contracts.append(LoadedContract(contract, path))
    _check_destinations(root, result)
    return result


def _check_destinations(root: Path, result: LoadResult) -> None:
    """A contract notifying a destination that destinations.yaml does not declare does not load (its alerts
    would only fail when the first one is sent); a broken destinations.yaml is an error of its own."""
    try:
        declared = destinations.load_destinations(root)
    except destinations.DestinationError as exc:
        path = str(root / destinations.FILE_NAME)
        result.errors.append(ContractError(path, "", str(exc).removeprefix(f"{path}: ")))
        return
    for loaded in list(result.contracts):
        unknown = destinations.unknown_names(loaded.contract, declared)
        if not unknown:
            continue
        node = safe_yaml.compose(loaded.path.read_text(), settings.yaml_limits())
        result.errors.extend(ContractError(str(loaded.path), _readable_loc(where), message, _line_of(node, where))
                             for where, message in unknown)
        result.contracts.remove(loaded)
