"""The shell blocks of README.md and docs/*.md, and which test runs each of them as written.

Every ```bash block of these pages is executed by a test, in one of three ways:

- by default, test_cli.py's walk runs it, in page order (README.md first, then the pages in the order of
  mkdocs.yml's nav), in a newcomer's shell on the demo's instance;
- a block that another test runs has a marker on the line before it,
  ``<!-- run by: scrape_contracts_tests/api/test_readme_api.py::test_readme_api_block -->`` (or
  ``<!-- run by: .ci/run -->``), and that test takes it with ``blocks_run_by(__file__, "<its name>")``;
- a block that cannot run on this machine says why: ``<!-- not run here: needs Kubernetes -->``.

test_doc_blocks.py holds every marker to this: the test a marker names exists and takes its block, and no
other kind of shell block (```sh, ```console) slips past the collector.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"

FENCE = re.compile(r"^( *)```bash\n(.*?)^\1```", re.S | re.M)
MARKER = re.compile(r"^ *<!--\s*(run by|not run here):\s*(.*?)\s*-->\s*$", re.M)


class Runner(enum.Enum):
    WALK = "walk"  # test_cli.py runs it in page order on the demo's instance
    TEST = "run by"  # the test (or .ci/run) its marker names runs it
    NOT_HERE = "not run here"  # its marker says why it cannot run on this machine


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/review.md
    line: int  # of the opening fence
    text: str  # the commands, dedented, comments and all
    runner: Runner
    note: str = ""  # the marker's test (path::name, or .ci/run) or reason

    def has(self, fragment: str) -> bool:
        return fragment in self.text

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Marker:
    page: str
    line: int
    attached: bool  # the next non-blank line opens a ```bash block


def pages() -> list[Path]:
    """README.md, then the docs pages in nav order, then any page the nav leaves out (sorted)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = [DOCS / name for name in _nav_files(config.get("nav", []))]
    rest = sorted(p for p in DOCS.rglob("*.md") if p not in in_nav)
    return [README, *[p for p in in_nav if p.exists()], *rest]


def _nav_files(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    return []


def _page_blocks(path: Path) -> tuple[list[Block], list[Marker]]:
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(REPO).as_posix()
    lines = text.splitlines()
    blocks, markers = [], []
    fence_lines = set()
    for match in FENCE.finditer(text):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines())
        line = text[:match.start()].count("\n") + 1
        fence_lines.add(line)
        runner, note = Runner.WALK, ""
        before = _previous_nonblank(lines, line)
        marker = MARKER.match(lines[before - 1]) if before else None
        if marker:
            runner, note = Runner(marker.group(1)), marker.group(2)
        blocks.append(Block(page, line, body.strip() + "\n", runner, note))
    for match in MARKER.finditer(text):
        line = text[:match.start()].count("\n") + 1
        after = next((n for n in range(line + 1, len(lines) + 1) if lines[n - 1].strip()), None)
        markers.append(Marker(page, line, after in fence_lines))
    return blocks, markers


def _previous_nonblank(lines: list[str], line: int) -> int | None:
    """The number of the last non-blank line before ``line`` (1-based), if any."""
    for number in range(line - 1, 0, -1):
        if lines[number - 1].strip():
            return number
    return None


def bash_blocks() -> list[Block]:
    """Every ```bash block of README.md and docs/, in page order."""
    return [block for path in pages() for block in _page_blocks(path)[0]]


def markers() -> list[Marker]:
    return [marker for path in pages() for marker in _page_blocks(path)[1]]


def walk_blocks() -> list[Block]:
    """The blocks test_cli.py's walk runs, in order."""
    return [block for block in bash_blocks() if block.runner is Runner.WALK]


def blocks_run_by(test_file: str, name: str) -> list[Block]:
    """The blocks whose marker names this test; at least one, or the marker went missing."""
    test = f"{Path(test_file).resolve().relative_to(REPO).as_posix()}::{name}"
    found = [b for b in bash_blocks() if b.runner is Runner.TEST and b.note == test]
    assert found, f"no ```bash block in README.md or docs/ is marked <!-- run by: {test} -->"
    return found


def project_folder(tmp: Path) -> Path:
    """A folder that looks like the clone the documented commands run in, with none of its state."""
    folder = tmp / "clone"
    folder.mkdir()
    for name in ("contracts", "deploy", "examples", "benchmarks", "workspace.yaml", "pyproject.toml"):
        (folder / name).symlink_to(REPO / name)
    return folder


def run_blocks(blocks: list[Block], cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """``blocks`` in order, each through bash in ``cwd`` (this interpreter's scripts first on PATH:
    ``scrape-contracts``); their outputs. A block that fails or prints a traceback fails the test."""
    import os
    import subprocess
    import sys

    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    outputs = []
    for block in blocks:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=cwd, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PATH": path, **(env or {})})
        assert done.returncode == 0 and "Traceback" not in done.stderr, \
            f"{block.where}:\n{block.text}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    return outputs


def python_sample(page: Path, name: str) -> str:
    """The ```python block right after ``<!-- sample: name -->`` on ``page``."""
    found = re.search(rf"<!-- sample: {re.escape(name)} -->\n```python\n(.*?)```", page.read_text(encoding="utf-8"),
                      re.S)
    assert found, f"{page.name} has no sample {name!r}"
    return found.group(1)
