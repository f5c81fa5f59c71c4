"""Every shell block of README.md and docs/ is run by a test, or says why it cannot run here.

These checks read files only (no subprocess): the blocks themselves run in the tests their markers name and
in test_cli.py's walk (see readme.py for the three ways a block is run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from scrape_contracts_tests.readme import REPO, Runner, bash_blocks, markers, pages

# the blocks that cannot run on this machine, each listed here on purpose: (page, first line) -> reason
NOT_RUN_HERE = {
    ("docs/scale.md", "kubectl -n dagster create secret generic scrape-contracts-env \\"):
        "needs a Kubernetes cluster",
    ("docs/scale.md", "dagster-celery worker start -A dagster_celery.app -y deploy/celery_worker.yaml -- --pool threads --concurrency 1"):
        "a long-running worker; test_celery_chunks.py starts this command with deploy/celery_worker.yaml, on its own queue",
    ("docs/kubernetes.md", "kubectl -n dagster create secret generic scrape-contracts-env \\"):
        "needs a Kubernetes cluster",
    ("docs/multihost.md", "sudo env PATH=\"$PATH\" python benchmarks/multihost.py --targets 500 --workers 3"):
        "as root, minutes of benchmark; test_benchmark_multihost.py runs this script at 40 targets",
    ("docs/multihost.md", "sudo env PATH=\"$PATH\" python benchmarks/multihost.py --targets 2000 --workers 1,2,3"):
        "as root, about seven minutes of benchmark; test_benchmark_multihost.py runs this script at 40 targets",
    ("docs/multihost.md", "sudo env PATH=\"$PATH\" python benchmarks/multihost.py --targets 600 --workers 3"):
        "as root, about two minutes of benchmark each; test_benchmark_multihost.py checks its memory line at 40 targets",
    ("docs/multihost.md", "sudo env PATH=\"$PATH\" python benchmarks/multihost.py --targets 20000 --workers 3"):
        "as root, about 25 minutes of benchmark at that load",
    ("docs/multihost.md", "sudo env PATH=\"$PATH\" python benchmarks/multihost.py --targets 20000 --workers 3 --faults"):
        "as root, about 25 minutes of benchmark at that load",
    ("docs/performance.md", "python benchmarks/throughput.py --pages 2000 --paths raw,batch --postgres --server nginx"):
        "minutes of benchmark that load the whole machine; test_benchmark_throughput.py runs this script at 40 pages",
    ("docs/performance.md", "python benchmarks/politeness.py"):
        "about ten minutes of benchmark that load the whole machine; test_benchmark_politeness.py runs it on three hosts",
    ("docs/data-contracts.md",
     "python3 -m venv ~/.datacontract && ~/.datacontract/bin/pip install 'datacontract-cli[postgres]==1.2.8'"):
        "an install; the tests make the same environment once per machine and use it",
}
SHELL_FENCE = re.compile(r"^ *```\s*(bash|sh|shell|console|zsh|shell-session|terminal)\b(.*)$", re.M)


def test_every_shell_block_is_a_plain_bash_block_the_collector_finds() -> None:
    """```sh, ```console or ```bash with attributes would escape the collector, and so every test."""
    for path in pages():
        text = path.read_text(encoding="utf-8")
        for match in SHELL_FENCE.finditer(text):
            line = text[:match.start()].count("\n") + 1
            where = f"{path.relative_to(REPO)}:{line}"
            assert match.group(1) == "bash" and not match.group(2).strip(), (
                f"{where}: write shell commands as a plain ```bash block, so that a test runs them")
    found = {(b.page, b.line) for b in bash_blocks()}
    fences = {(p.relative_to(REPO).as_posix(), n) for p in pages()
              for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if line.strip() == "```bash"}
    assert found == fences, sorted(fences ^ found)


def test_every_marker_sits_right_before_a_bash_block() -> None:
    stray = [f"{m.page}:{m.line}" for m in markers() if not m.attached]
    assert not stray, f"a run-by / not-run-here marker must be the line before a ```bash block: {stray}"


def test_every_run_by_marker_names_a_test_that_takes_its_block() -> None:
    claimed = [b for b in bash_blocks() if b.runner is Runner.TEST]
    assert claimed
    for block in claimed:
        if block.note == ".ci/run":
            _ci_runs(block.text, block.where)
            continue
        file, _, name = block.note.partition("::")
        path = REPO / file
        assert file.startswith("scrape_contracts_tests/") and path.is_file() and name, (
            f"{block.where}: `run by: {block.note}` must be <test file under scrape_contracts_tests/>::<function>")
        functions = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                     if isinstance(node, ast.FunctionDef) and node.name == name]
        assert len(functions) == 1, f"{block.where}: {file} has no function {name}"
        assert any(_takes_its_block(call, name) for call in ast.walk(functions[0])), (
            f"{block.where}: {block.note} must take its block with blocks_run_by(__file__, {name!r})")


def _takes_its_block(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "blocks_run_by"
            and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__"
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == name)


def _ci_runs(text: str, where: str) -> None:
    """.ci/run runs the block's commands in its order (the docs build may come between them)."""
    script = "\n".join(line for line in (REPO / ".ci" / "run").read_text().splitlines()
                       if not line.lstrip().startswith("#"))
    at = 0
    for command in text.strip().split(" && "):
        found = script.find(command, at)
        assert found >= 0, f"{where}: .ci/run does not run `{command}` (after what comes before it)"
        at = found + len(command)


def test_blocks_not_run_here_are_the_listed_ones() -> None:
    excused = {(b.page, b.text.splitlines()[0]): b.note for b in bash_blocks() if b.runner is Runner.NOT_HERE}
    for (page, first), reason in sorted(excused.items()):
        print(f"not run here: {page}: {first}  ({reason})")
    assert excused == NOT_RUN_HERE


def test_the_walk_runs_every_unmarked_block_starting_with_the_demo() -> None:
    """An unmarked block is run by test_cli.py's walk, which must go over all of walk_blocks()."""
    walk = [b for b in bash_blocks() if b.runner is Runner.WALK]
    assert walk[0].page == "README.md" and walk[0].has("scrape-contracts demo"), walk[0]
    tree = ast.parse((REPO / "scrape_contracts_tests" / "cli" / "test_cli.py").read_text(encoding="utf-8"))
    [test] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "test_doc_commands_in_order"]
    loops = [n for n in ast.walk(test) if isinstance(n, ast.For) and isinstance(n.iter, ast.Call)
             and isinstance(n.iter.func, ast.Name) and n.iter.func.id == "walk_blocks"]
    assert loops, "test_doc_commands_in_order must run `for block in walk_blocks()`"
    assert not [n for n in ast.walk(loops[0]) if isinstance(n, ast.Continue | ast.Break)], (
        "the walk may skip no block: mark it `run by` or `not run here` instead")


def test_readme_is_short_and_its_contract_is_the_demos() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    [shown] = re.findall(r"^```yaml\n(name: books\n.*?)^```", readme, re.S | re.M)
    assert yaml.safe_load(shown) == yaml.safe_load((REPO / "contracts" / "books.yaml").read_text())


def test_every_docs_page_is_in_the_nav() -> None:
    """The walk runs pages in nav order; a page outside the nav would also be missing from the site."""
    in_nav = set(re.findall(r"([\w/-]+\.md)", (REPO / "mkdocs.yml").read_text()))
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in Path(REPO / "docs").rglob("*.md")}
    assert on_disk <= in_nav, sorted(on_disk - in_nav)
