"""The pages and sections the package's messages and docstrings send a reader to exist.

Errors tell the user where to read on (``see docs/contracts.md#javascript-pages-the-browser-adapter``); when
the docs were split out of the README, messages kept pointing at README sections that had moved. Every
``docs/<page>.md`` and ``docs/<page>.md#<anchor>`` named in the package must be a page of docs/ with that
heading (anchors as mkdocs makes them), and no message may send the reader to the README, which keeps only
the first steps.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "scrape_contracts"
REFERENCE = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+))?")


def _anchor(heading: str) -> str:
    # mkdocs' default slug (Python-Markdown's toc): lower case, punctuation dropped, spaces to hyphens
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(page: Path) -> set[str]:
    headings = [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
                if re.match(r"#{1,6} ", line)]
    return {_anchor(h) for h in headings}


def test_the_anchor_rule_matches_a_known_link() -> None:
    # docs/lists.md links here by hand, and mkdocs --strict checks that link: the rule gives the same anchor
    assert "(contracts.md#javascript-pages-the-browser-adapter)" in (REPO / "docs" / "lists.md").read_text()
    assert _anchor("JavaScript pages: the browser adapter") == "javascript-pages-the-browser-adapter"
    assert _anchor("Target addresses at `targets add`") == "target-addresses-at-targets-add"


def test_every_docs_page_and_section_the_package_names_exists() -> None:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for page, anchor in REFERENCE.findall(line):
                target = REPO / "docs" / page
                where = f"{path.relative_to(REPO)}:{number}"
                if not target.exists():
                    missing.append(f"{where}: docs/{page} does not exist")
                elif anchor and anchor not in _anchors(target):
                    missing.append(f"{where}: docs/{page} has no section #{anchor}")
    assert missing == []


def test_no_message_sends_the_reader_to_the_readme() -> None:
    # the README is the first five minutes; the reference lives in docs/ (a message naming a README section
    # pointed at one that had moved)
    sent = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
            for path in sorted(PACKAGE.rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if "README" in line]
    assert sent == []
