"""Local paths in a contract (``fetch.fixture_dir``, ``targets.file``) are confined at load time."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts

FIXTURE_CONTRACT = """
name: leak
targets: [https://etc/passwd]
fetch:
  adapter: fixture
  fixture_dir: {fixture_dir}
fields:
  title: {{selector: "//text()"}}
"""

DYNAMIC_CONTRACT = """
name: leak
targets: {{dynamic: true, file: {file}}}
fields:
  title: {{selector: h1}}
"""


@pytest.fixture
def contracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SCRAPE_CONTRACTS_FIXTURE_ROOT", raising=False)
    folder = tmp_path / "project" / "contracts"
    folder.mkdir(parents=True)
    (tmp_path / "project" / "site").mkdir()
    (tmp_path / "project" / "targets.txt").write_text("https://shop.example.com/p/1\n")
    return folder


def _write(folder: Path, text: str) -> Path:
    path = folder / "leak.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("fixture_dir", ["/", "../../..", "'../../..//etc'", "../.git", "../site/../.."])
def test_validate_refuses_a_fixture_dir_outside_the_project(
    contracts: Path, capsys, fixture_dir: str
) -> None:
    path = _write(contracts, FIXTURE_CONTRACT.format(fixture_dir=fixture_dir))

    assert main(["--contracts-dir", str(contracts), "validate"]) == 1

    out = capsys.readouterr().out
    assert f"error  {path}:6: fetch.fixture_dir: fetch.fixture_dir " in out
    assert "SCRAPE_CONTRACTS_FIXTURE_ROOT" in out or "hidden" in out


def test_a_fixture_dir_symlinked_out_of_the_project_is_refused(contracts: Path) -> None:
    (contracts / "pages").symlink_to("/etc")
    _write(contracts, FIXTURE_CONTRACT.format(fixture_dir="pages"))
    [error] = load_contracts(contracts).errors
    assert error.field == "fetch.fixture_dir" and "resolves to /etc," in error.message


def test_project_folders_and_the_operator_root_are_allowed(
    contracts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(contracts, FIXTURE_CONTRACT.format(fixture_dir="../site"))
    assert load_contracts(contracts).errors == []

    elsewhere = tmp_path / "snapshots"
    elsewhere.mkdir()
    _write(contracts, FIXTURE_CONTRACT.format(fixture_dir=elsewhere))
    assert [e.field for e in load_contracts(contracts).errors] == ["fetch.fixture_dir"]
    monkeypatch.setenv("SCRAPE_CONTRACTS_FIXTURE_ROOT", str(elsewhere))
    assert load_contracts(contracts).errors == []


@pytest.mark.parametrize("file", ["/etc/passwd", "../../../../../../etc/passwd", "../.env"])
def test_a_targets_file_outside_the_project_is_refused(contracts: Path, file: str) -> None:
    _write(contracts, DYNAMIC_CONTRACT.format(file=file))
    [error] = load_contracts(contracts).errors
    assert error.field == "targets.file" and error.line == 3
    assert "root:" not in error.message

    _write(contracts, DYNAMIC_CONTRACT.format(file="../targets.txt"))
    assert load_contracts(contracts).errors == []
