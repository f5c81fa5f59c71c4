"""The package's shape: layers import inward only, no circles, no private names across modules, files a
reader can hold in mind, and Dagster's private modules only where ``dagster.yaml`` may name a class."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scrape_contracts"
ROOT_MODULES = {"__init__.py", "definitions.py", "settings.py"}
MAX_LINES = 400  # "a few hundred lines, one job" (STYLE.md); issue 22 asks for none over about 400
# inner layers never import outer ones (ARCHITECTURE.md, Layers); a layer may import itself and any inner one
LAYERS = ["engine", "contract", "adapters", "service", "defs", "instance", "api", "cli"]
INNER = {"engine": {"engine"}, "contract": {"contract", "engine"},
         "adapters": {"adapters", "contract", "engine"},
         "service": {"service", "adapters", "contract", "engine"},
         "defs": {"defs", "service", "adapters", "contract", "engine"},
         "instance": {"instance"},
         "api": {"api", "defs", "service", "adapters", "contract", "engine"},
         "cli": {"cli", "api", "defs", "service", "adapters", "contract", "engine"}}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (annotations only: no import at run time)."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            stack += node.orelse
            continue
        found.append(node)
        stack += ast.iter_child_nodes(node)
    return found


def _imports(modules: dict[str, Path]) -> list[tuple[str, str, str | None, int]]:
    """(importer, imported module, imported name or None, line) for every import of the package."""
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in modules:
                        edges.append((name, full, None, node.lineno))
                    else:
                        edges.append((name, target, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                edges += [(name, alias.name, None, node.lineno) for alias in node.names]
    return [e for e in edges if e[1].split(".")[0] in ("scrape_contracts", "dagster")]


def test_the_root_holds_only_the_public_face_the_code_location_and_the_settings() -> None:
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name not in ROOT_MODULES
                   and not p.name.endswith(".pyc"))
    assert loose == [], f"files at the package root: {loose}"


def test_no_private_name_is_imported_from_another_module() -> None:
    modules = _modules()
    crossing = [f"{a}:{line} imports {name} from {b}" for a, b, name, line in _imports(modules)
                if b.startswith("scrape_contracts") and name and name.startswith("_") and b != a
                and not name.startswith("__")]
    assert crossing == []


def test_dagster_private_modules_only_in_instance() -> None:
    modules = _modules()
    private = [f"{a}:{line} imports {b}" for a, b, _, line in _imports(modules)
               if (b == "dagster._" or b.startswith("dagster._")) and not a.startswith("scrape_contracts.instance")]
    assert private == []


def test_no_import_circles_between_modules() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b, _, _ in _imports(modules):
        # importing a.b.c runs the __init__ of a.b first: a circle through a package's __init__ is one too
        # (robots.py imported adapters.fetch.page while adapters.fetch's __init__ imported robots.py)
        parts = b.split(".")
        for c in [".".join(parts[:i]) for i in range(2, len(parts))] + [b]:
            if c in modules and c != a and not a.startswith(c + "."):  # a package's own __init__ is not a circle
                graph[a].add(c)
    circles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_layers_import_inward_only() -> None:
    modules = _modules()
    outward = []
    for a, b, _, line in _imports(modules):
        if not (a.startswith("scrape_contracts.") and b.startswith("scrape_contracts.")):
            continue
        layer_a, layer_b = a.split(".")[1], b.split(".")[1]
        if layer_a in INNER and layer_b in LAYERS and layer_b not in INNER[layer_a]:
            outward.append(f"{a}:{line} ({layer_a}) imports {b} ({layer_b})")
    assert outward == []


def test_every_module_is_a_size_a_reader_can_hold() -> None:
    big = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert big == {}
