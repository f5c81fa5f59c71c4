"""The shell blocks of the README (and of a page in docs/), in order, for the tests that run them as written.

A block right after ``<!-- not run here: reason -->`` is one no test runs (``Block.not_run`` is the reason).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_NOT_RUN = re.compile(r"<!-- not run here: ([^>]*?) -->\s*$")


@dataclass(frozen=True)
class Block:
    line: int
    text: str  # the commands, dedented, comments and all
    not_run: str | None = None

    def has(self, fragment: str) -> bool:
        return fragment in self.text


def bash_blocks(page: Path = README) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^( *)```bash\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines())
        marked = _NOT_RUN.search(text[max(0, match.start() - 300):match.start()])
        blocks.append(Block(text[:match.start()].count("\n") + 1, body.strip() + "\n",
                            marked.group(1) if marked else None))
    return blocks


def run_page(page: Path, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """Every block of ``page`` that is not marked, in order, through bash in ``cwd`` (this interpreter's
    scripts first on PATH: ``scrape-contracts``); their outputs."""
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    outputs = []
    for block in bash_blocks(page):
        if block.not_run:
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=cwd, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PATH": path, **(env or {})})
        assert done.returncode == 0 and "Traceback" not in done.stderr, \
            f"{page.name} line {block.line}:\n{block.text}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    return outputs


def project_folder(tmp: Path) -> Path:
    """A folder that looks like the clone the README's commands run in, with none of its state."""
    folder = tmp / "clone"
    folder.mkdir()
    for name in ("contracts", "deploy", "examples", "benchmarks", "workspace.yaml", "pyproject.toml"):
        (folder / name).symlink_to(REPO / name)
    return folder


def python_sample(page: Path, name: str) -> str:
    """The ```python block right after ``<!-- sample: name -->`` on ``page``."""
    found = re.search(rf"<!-- sample: {re.escape(name)} -->\n```python\n(.*?)```", page.read_text(encoding="utf-8"),
                      re.S)
    assert found, f"{page.name} has no sample {name!r}"
    return found.group(1)
