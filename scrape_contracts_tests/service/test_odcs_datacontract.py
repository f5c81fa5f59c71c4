"""The ODCS export checked by datacontract-cli itself (in its own virtualenv): lint, and test on live data (issue 26)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from scrape_contracts.cli import main
from scrape_contracts_tests import datacontract_cli
from scrape_contracts_tests.conftest import Harness
from scrape_contracts_tests.readme import REPO, blocks_run_by, run_blocks
from scrape_contracts_tests.service.examples import copy_examples, scrape_examples

pytestmark = pytest.mark.slow
DOC = REPO / "docs" / "data-contracts.md"


@pytest.fixture(scope="session")
def datacontract() -> Path:
    return datacontract_cli.ensure_venv()


def _export(harness: Harness, name: str, out: Path, *extra: str) -> dict:
    assert main(["--contracts-dir", str(harness.contracts_dir), "export", "odcs", name, "--out", str(out),
                 *extra]) == 0
    return yaml.safe_load(out.read_text())


@pytest.mark.timeout(1200)  # the first session installs datacontract-cli (minutes)
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_datacontract_lints_every_example_and_tests_it_against_the_accepted_view(
        datacontract: Path, harness: Harness, tmp_path: Path) -> None:
    names = copy_examples(harness)
    scrape_examples(harness)
    db = harness.backend.db_url.rsplit("/", 1)[1]
    env = {"DATACONTRACT_POSTGRES_USERNAME": "postgres", "DATACONTRACT_POSTGRES_PASSWORD": "unused"}
    document_of = {}
    for name in names:
        out = tmp_path / f"{name}.odcs.yaml"
        document = document_of[name] = _export(harness, name, out)
        assert document["servers"][0] | {"database": db} == document["servers"][0]
        linted = datacontract_cli.run(datacontract, "lint", str(out))
        assert linted.returncode == 0 and "valid" in linted.stdout, linted.stdout + linted.stderr
        results = tmp_path / f"{name}.results.json"
        tested = datacontract_cli.run(datacontract, "test", str(out), "--server", "production",
                                      "--output", str(results), "--output-format", "json", env=env)
        report = json.loads(results.read_text())
        checks = report["checks"]
        failed = [c for c in checks if c["result"] != "passed"]
        assert tested.returncode == 0 and not failed, (name, failed, tested.stdout[-4000:])
        # the rules ran, not only the document's shape: the types, the required fields, the quality rules
        kinds = {c["type"] for c in checks}
        assert {"field_physical_type", "field_required", "field_minimum"} <= kinds, kinds
        assert any("primary_key" in kind for kind in kinds), kinds
        assert "model_quality_sql" in kinds or name == "jobs", kinds

    # docs/data-contracts.md as written, with datacontract from its own environment on PATH
    path = f"{datacontract.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    blocks = blocks_run_by(__file__, "test_datacontract_lints_every_example_and_tests_it_against_the_accepted_view")
    exported, checked = run_blocks(blocks, harness.contracts_dir.parent, {**env, "PATH": path})
    assert "made the view accepted.books" in exported
    assert "Data contract is valid" in checked and "🟢" in checked.split("valid", 1)[1], checked[-2000:]

    # the view is live, and the rules bite: a wrong SKU and a negative price in the store fail their checks
    engine = sa.create_engine(harness.backend.db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sc_accepted SET record = CAST(:record AS json) WHERE contract = 'books' "
                             "AND partition = 'dune'"),
                     {"record": json.dumps({"title": "Dune", "sku": "BK-9999", "price": -1, "in_stock": True})})
    engine.dispose()
    tested = datacontract_cli.run(datacontract, "test", str(tmp_path / "books.odcs.yaml"), "--server", "production",
                                  "--output", str(tmp_path / "broken.json"), "--output-format", "json", env=env)
    failed = {c["key"] for c in json.loads((tmp_path / "broken.json").read_text())["checks"] if c["result"] == "failed"}
    assert tested.returncode == 1 and failed == {"books__price__field_minimum", "books__quality_sql_0"}, failed

    # a contract edit: a new required field is in the export and the view at once; the records accepted before
    # it do not have it, and datacontract test says so (until the targets are scraped again)
    books = harness.contracts_dir / "books.yaml"
    books.write_text(books.read_text().replace("fields:\n", "fields:\n  author:\n    selector: \".author\"\n", 1))
    edited = _export(harness, "books", tmp_path / "edited.odcs.yaml")
    assert {"name": "author", "required": True}.items() <= edited["schema"][0]["properties"][2].items()
    assert edited["version"] != document_of["books"]["version"]
    tested = datacontract_cli.run(datacontract, "test", str(tmp_path / "edited.odcs.yaml"), "--server",
                                  "production", "--output", str(tmp_path / "edited.json"), "--output-format", "json",
                                  env=env)
    failed = {c["key"] for c in json.loads((tmp_path / "edited.json").read_text())["checks"] if c["result"] == "failed"}
    assert "books__author__field_required" in failed and "books__author__field_is_present" not in failed, failed
