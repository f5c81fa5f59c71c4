"""Reading a contract's YAML with libyaml's speed, and without its three traps.

- **Alias bombs**: a few hundred bytes of nested anchors and aliases (``&a [*b, *b, ...]``) stand for
  billions of nodes. libyaml builds them as shared objects cheaply, but everything after it (pydantic,
  ``json.dumps``, the event log) walks the expanded tree. The node graph is measured before anything is
  constructed: the document, aliases expanded, may hold at most ``max_nodes`` nodes, and an alias may not
  refer to a node that contains it.
- **Duplicate keys**: YAML says a mapping's keys are unique, PyYAML keeps the last silently (a second
  ``allow_private_addresses: true`` further down wins). They are errors, at the line of the repeat.
- **Size**: a contract file larger than ``max_bytes`` is not read at all.

The root node comes back with the data, so error messages point at lines without parsing twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# libyaml when PyYAML was built with it: every process that loads the code location parses every contract
# (a contract of 2,000 targets took 1 s with the pure-Python parser)
_BASE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_MERGE_TAG = "tag:yaml.org,2002:merge"
# where an anchor (&name) can stand: an alias needs one, so a document without any has nothing to expand.
# Conservative (a quoted "Q &A" matches too, and only costs the full check); measuring every document
# instead took as long as parsing it (45 ms for 2,000 targets).
_ANCHOR = re.compile(r"(?:^|[\s\[{,:])&[^\s\[\]{},]")


@dataclass(frozen=True)
class YamlLimits:
    max_bytes: int = 10_000_000
    max_nodes: int = 1_000_000


class YamlLimitError(yaml.YAMLError):
    """A document refused before it was built; ``line`` is 1-based when known."""

    def __init__(self, problem: str, line: int | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


class _ContractLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [(k.tag, k.value) for k, _ in node.value
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE_TAG]
        if len(set(keys)) != len(keys):
            self._duplicate(node)
        return super().construct_mapping(node, deep=deep)

    @staticmethod
    def _duplicate(node: yaml.MappingNode) -> None:
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # merged keys (<<) may be overridden on purpose
            key = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlLimitError(
                    f"duplicate key {key_node.value!r} (first at line {seen[key]}): each key may appear once "
                    "in a mapping; YAML would silently keep only the last", line)
            seen[key] = line


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_expansion(root: yaml.Node, max_nodes: int) -> int:
    """Nodes of the document with every alias expanded; raise YamlLimitError past ``max_nodes`` or on an
    alias that contains itself. Linear in the distinct nodes: each one's expanded size is computed once."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            on_path.discard(key)
            total = 1 + sum(size[id(child)] for child in _children(node))
            if total > max_nodes:
                raise YamlLimitError(
                    f"the document expands to more than {max_nodes:,} nodes once its aliases (*name) are "
                    f"replaced by what they refer to (limit yaml_max_nodes, setting "
                    f"SCRAPE_CONTRACTS_YAML_MAX_NODES): write the values out, or use fewer nested aliases",
                    node.start_mark.line + 1)
            size[key] = total
            continue
        if key in size:
            continue  # an alias of a node already measured
        if key in on_path:
            raise YamlLimitError("an alias refers to a node that contains it (a recursive structure)",
                                 node.start_mark.line + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    return size[id(root)]


def load(text: str, limits: YamlLimits = YamlLimits()) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of one YAML document; raises yaml.YAMLError (YamlLimitError for our limits)."""
    if len(text) > limits.max_bytes:
        raise YamlLimitError(_too_big(len(text), limits))
    loader = _ContractLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        if _ANCHOR.search(text):
            check_expansion(node, limits.max_nodes)
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def compose(text: str, limits: YamlLimits = YamlLimits()) -> yaml.Node | None:
    """The node tree only (for line numbers of a document already known to be well-formed)."""
    if len(text) > limits.max_bytes:
        raise YamlLimitError(_too_big(len(text), limits))
    return yaml.compose(text, Loader=_BASE_LOADER)


def read_text(path: Path, limits: YamlLimits = YamlLimits()) -> str:
    """The file's text, refusing one larger than ``max_bytes`` before reading it."""
    size = path.stat().st_size
    if size > limits.max_bytes:
        raise YamlLimitError(_too_big(size, limits))
    return path.read_text(encoding="utf-8")


def _too_big(size: int, limits: YamlLimits) -> str:
    return (f"the file is {size:,} bytes, more than the {limits.max_bytes:,} a contract may have (limit "
            "yaml_max_bytes, setting SCRAPE_CONTRACTS_YAML_MAX_BYTES)")
