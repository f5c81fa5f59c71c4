"""``scrape-contracts export data``: accepted records as Parquet, CSV and JSON Lines, read back typed (issue 26)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from scrape_contracts.adapters.store import AcceptedVersion
from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.service.exports import accepted_table
from scrape_contracts_tests.conftest import Harness
from scrape_contracts_tests.readme import REPO, blocks_run_by, run_blocks
from scrape_contracts_tests.service.examples import copy_examples

EXPORTS_DOC = REPO / "docs" / "exports.md"

pytestmark = pytest.mark.slow  # five scrape runs


def _export(harness: Harness, *args: str) -> int:
    return main(["--contracts-dir", str(harness.contracts_dir), "export", "data", *args])


def test_latest_and_as_of_exports_in_three_formats_keep_the_fields_types(
        sqlite_harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    copy_examples(harness)
    defs = harness.definitions()
    for key in ("dune", "neuromancer", "hyperion"):
        assert harness.run("books", key, defs).success
    assert harness.run("reviews", "cafe_aurora", defs).success
    between = dt.datetime.now(dt.timezone.utc)
    page = harness.contracts_dir.parent / "examples/site/v1/books.example.com/book/1.html"
    page.write_text(page.read_text().replace("$12.99", "$13.99"))
    assert harness.run("books", "dune", defs).success  # version 2 of dune

    assert _export(harness, "books", "--out", str(tmp_path / "books.parquet")) == 0
    assert "wrote 3 row(s) of 3 target(s) of books" in capsys.readouterr().out
    table = pq.read_table(tmp_path / "books.parquet")
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("partition", "string"), ("url", "string"), ("title", "string"), ("sku", "string"), ("price", "double"),
        ("in_stock", "bool"), ("_version", "int64"), ("_accepted_at", "timestamp[us, tz=UTC]"),
        ("_run_id", "string"), ("_gone", "bool")]
    frame = table.to_pandas().set_index("partition")
    assert not frame["_gone"].any()  # books is not discovered: nothing is gone
    assert frame.loc["dune", "price"] == 13.99 and frame.loc["dune", "_version"] == 2
    assert frame["in_stock"].dtype == bool and str(frame["_accepted_at"].dtype) == "datetime64[us, UTC]"

    # as of a moment: the version accepted then; one target only
    assert _export(harness, "books", "--at", between.isoformat(), "--partition", "dune", "--partition", "nope",
                   "--out", str(tmp_path / "then.csv")) == 0
    out, err = capsys.readouterr()
    assert "wrote 1 row(s) of 1 target(s)" in out and "no accepted data as of" in err and "nope" in err
    then = pd.read_csv(tmp_path / "then.csv", parse_dates=["_accepted_at"])
    assert then.to_dict("list") | {"_accepted_at": None, "_run_id": None} == {
        "partition": ["dune"], "url": ["https://books.example.com/book/1.html"], "title": ["Dune"],
        "sku": ["BK-0001"], "price": [12.99], "in_stock": [True], "_version": [1], "_accepted_at": None,
        "_run_id": None, "_gone": [False]}
    assert then["price"].dtype == float and then["in_stock"].dtype == bool and then["_version"].dtype == "int64"
    assert then["_accepted_at"].iloc[0] <= pd.Timestamp(between)

    # a list contract: one row per record, its date a date, its rating an integer
    assert _export(harness, "reviews", "--out", str(tmp_path / "reviews.parquet")) == 0
    reviews = pq.read_table(tmp_path / "reviews.parquet")
    assert reviews.num_rows == 60 and reviews.column_names[:3] == ["partition", "url", "record_key"]
    assert (str(reviews.schema.field("date").type), str(reviews.schema.field("rating").type)) == ("date32[day]",
                                                                                                   "int64")
    assert all(isinstance(d, dt.date) for d in reviews.column("date").to_pylist())
    assert _export(harness, "reviews", "--out", str(tmp_path / "reviews.jsonl")) == 0
    lines = [json.loads(line) for line in (tmp_path / "reviews.jsonl").read_text().splitlines()]
    assert len(lines) == 60 and lines[0]["date"] == reviews.column("date")[0].as_py().isoformat()
    assert isinstance(lines[0]["rating"], int)
    assert pd.read_json(tmp_path / "reviews.jsonl", lines=True)["rating"].dtype == "int64"

    # docs/exports.md as written, in the folder holding the contracts
    monkeypatch.chdir(tmp_path)
    blocks = blocks_run_by(__file__, "test_latest_and_as_of_exports_in_three_formats_keep_the_fields_types")
    (wrote,) = run_blocks(blocks, tmp_path)
    assert wrote.splitlines() == ["wrote 3 row(s) of 3 target(s) of books to books.parquet (parquet)",
                                  "wrote 60 row(s) of 1 target(s) of reviews to reviews.csv (csv)",
                                  "wrote 1 row(s) of 1 target(s) of books to dune.jsonl (jsonl)"], wrote
    assert pd.read_csv(tmp_path / "reviews.csv")["rating"].dtype == "int64"
    assert [json.loads(line)["price"] for line in (tmp_path / "dune.jsonl").read_text().splitlines()] == [13.99]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(re.search(r"```python\n(.*?)```", EXPORTS_DOC.read_text(), re.S).group(1), {})  # noqa: S102
    assert printed.getvalue().split() == ["float64", "bool", "datetime64[us,", "UTC]"]

    # mistakes: one line each
    assert _export(harness, "books", "--out", str(tmp_path / "books.xlsx")) == 1
    assert "pass --format parquet, csv or jsonl" in capsys.readouterr().err
    assert _export(harness, "books", "--at", "2026-01-01T00:00:00", "--out", str(tmp_path / "x.csv")) == 1
    assert "has no time zone" in capsys.readouterr().err


def test_a_datetime_field_is_a_utc_timestamp_whatever_offset_the_page_gave(tmp_path: Path) -> None:
    (tmp_path / "events.yaml").write_text("""
name: events
targets: [https://events.example.com/e/1]
fields:
  starts: {selector: time, type: datetime}
  seats: {selector: .seats, type: integer, required: false}
""")
    contract = load_contracts(tmp_path).by_name()["events"].contract
    stamp = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)
    version = AcceptedVersion("events", "e1", 1, {"starts": "2026-03-05T14:30:00+01:00", "seats": None},
                              "https://events.example.com/e/1", 1, "run", None, "scrape", None, None, stamp)
    table = accepted_table(contract, [version])
    assert table.column("starts").to_pylist() == [dt.datetime(2026, 3, 5, 13, 30, tzinfo=dt.timezone.utc)]
    assert str(table.schema.field("seats").type) == "int64" and table.column("seats").to_pylist() == [None]


def test_a_target_gone_from_its_source_is_flagged_in_the_export_as_read_accepted_flags_it(tmp_path: Path) -> None:
    (tmp_path / "events.yaml").write_text("""
name: events
targets: [https://events.example.com/e/1, https://events.example.com/e/2]
fields:
  seats: {selector: .seats, type: integer}
""")
    contract = load_contracts(tmp_path).by_name()["events"].contract
    stamp = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)
    versions = [AcceptedVersion("events", key, 1, {"seats": 3}, f"https://events.example.com/e/{key[-1]}", 1,
                                "run", None, "scrape", None, None, stamp) for key in ("e1", "e2")]
    table = accepted_table(contract, versions, gone={"e2"})
    assert table.schema.names[-1] == "_gone" and str(table.schema.field("_gone").type) == "bool"
    assert dict(zip(table.column("partition").to_pylist(), table.column("_gone").to_pylist())) == \
        {"e1": False, "e2": True}
