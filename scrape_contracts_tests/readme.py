"""The README's shell blocks, in order, for the tests that run them as written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


@dataclass(frozen=True)
class Block:
    line: int
    text: str  # the commands, dedented, comments and all

    def has(self, fragment: str) -> bool:
        return fragment in self.text


def bash_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^( *)```bash\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines())
        blocks.append(Block(text[:match.start()].count("\n") + 1, body.strip() + "\n"))
    return blocks


def project_folder(tmp: Path) -> Path:
    """A folder that looks like the clone the README's commands run in, with none of its state."""
    folder = tmp / "clone"
    folder.mkdir()
    for name in ("contracts", "deploy", "examples", "benchmarks", "workspace.yaml", "pyproject.toml"):
        (folder / name).symlink_to(REPO / name)
    return folder
