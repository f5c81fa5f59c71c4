"""The ScrapeContracts Component: scaffolded, loaded and run in a Dagster project that is not this one.

The dg tests run Dagster's own CLI (dagster-dg-cli) as a subprocess, in a project made by hand in a temp
folder as ``create-dagster project`` would make it, and in this repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
from dagster.components.testing import create_defs_folder_sandbox

import scrape_contracts
from scrape_contracts import ScrapeContracts, contract_partitions, read_accepted
from scrape_contracts.defs.jobs import scrape_job_name
from scrape_contracts_tests.conftest import PRODUCT_CONTRACT, clean_env
from scrape_contracts_tests.readme import REPO, blocks_run_by

BIN = Path(sys.executable).parent
DOC = REPO / "docs" / "component.md"
# the only setting in the dagster.yaml of every instance these tests make: Dagster's usage statistics off
NO_TELEMETRY = "telemetry:\n  enabled: false\n"


def make_project(root: Path) -> Path:
    """A Dagster project as ``create-dagster project`` lays one out (flat): [tool.dg], a definitions.py that
    loads the defs folder, an empty defs/."""
    root.mkdir()
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "team_project"
        version = "0.1.0"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "team_project"
        """))
    package = root / "team_project"
    (package / "defs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(textwrap.dedent("""\
        from pathlib import Path

        import dagster as dg


        @dg.definitions
        def defs() -> dg.Definitions:
            return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
        """))
    return package / "defs"


def dg_env(home: Path) -> dict[str, str]:
    """A newcomer's shell with the venv's executables first, this worktree's code importable, and a
    DAGSTER_HOME of its own whose dagster.yaml holds nothing of ours."""
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(NO_TELEMETRY)
    return clean_env(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", DAGSTER_HOME=str(home),
                     PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                     COLUMNS="200")  # rich tables at full width: whole asset keys


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def dg_out(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = run(command, cwd, env)
    return done.stdout + done.stderr


def dg_json(command: str, cwd: Path, env: dict[str, str]) -> dict:
    return json.loads(run(command, cwd, env).stdout)


@pytest.mark.slow
def test_component_in_a_new_dagster_project(tmp_path: Path) -> None:
    """docs/component.md's commands in a fresh project; the attributes are tested in-process below."""
    defs_folder = make_project(tmp_path / "team")
    env = dg_env(tmp_path / "home")
    [block] = blocks_run_by(__file__, "test_component_in_a_new_dagster_project")
    outputs = {line: dg_out(line, tmp_path / "team", env) for line in block.text.splitlines()
               if line.strip() and not line.startswith("#")}
    scaffold, check, listed, launched = outputs.values()
    component = defs_folder / "scrape"
    assert (component / "defs.yaml").is_file() and (component / "contracts" / "example.yaml").is_file(), scaffold
    assert "All definitions loaded successfully." in check
    for name in ("scrape/example/candidate", "scrape/example ", "required_fields_present", "price_within_bounds",
                 "scrape_example_job", "review_job", "health_schedule", "review_sensor"):
        assert name in listed, name
    assert "RUN_SUCCESS" in launched
    # no db_url attribute, no SCRAPE_CONTRACTS_DB_URL: the project store in DAGSTER_HOME
    [row] = read_accepted("example", db_url=f"sqlite:///{tmp_path / 'home' / 'scrape_contracts.db'}"
                          ).to_dict("records")
    assert (row["partition"], row["name"], row["price"]) == ("product-1", "Desk lamp", 24.5)

    # installed, the package registers the component for every project in the environment
    components = dg_json("dg list components --json", tmp_path / "team", env)["items"]
    assert "scrape_contracts.ScrapeContracts" in {c["key"] for c in components}, (
        "dg does not list the component: is scrape_contracts installed (pip install -e .) since the "
        "dagster_dg_cli.registry_modules entry point was added?")


@pytest.mark.slow
def test_dg_check_and_list_defs_in_this_repository(tmp_path: Path) -> None:
    env = dg_env(tmp_path / "home")
    assert "All definitions loaded successfully." in dg_out("dg check defs", REPO, env)
    listed = dg_json("dg list defs --json", REPO, env)
    assets = {a["asset_key"]: a for a in listed["assets"]}
    assert {"scrape/books", "scrape/books/candidate", "scrape/jobs", "scrape/reviews", "scrape/_contracts"} <= set(assets)
    assert assets["scrape/books"]["group_name"] == "books"
    assert "scrape_books_job" in {j["name"] for j in listed["jobs"]}


def scaffold(sandbox, **params: str) -> Path:
    return sandbox.scaffold_component(component_cls=ScrapeContracts, defs_path="scrape",
                                      scaffold_params=params or None)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("SCRAPE_CONTRACTS_DB_URL", "SCRAPE_CONTRACTS_ARTIFACTS_DIR", "SCRAPE_CONTRACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def load(sandbox, path: Path) -> dg.Definitions:
    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, ScrapeContracts)
        return defs


def scrape(defs: dg.Definitions, contract: str, partition: str, instance: dg.DagsterInstance) -> None:
    result = defs.resolve_job_def(scrape_job_name(contract)).execute_in_process(
        partition_key=partition, instance=instance, raise_on_error=False)
    assert result.success


def python_block(heading: str) -> str:
    """The ```python block under ``## heading`` of docs/component.md."""
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    return re.search(r"^```python\n(.*?)^```", section, re.S | re.M).group(1)


def test_attributes_reach_the_assets_and_win_over_the_environment(home: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", f"sqlite:///{tmp_path / 'from_env.db'}")
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(tmp_path / "pages_from_env"))
    store = f"sqlite:///{tmp_path / 'from_yaml.db'}"
    monkeypatch.setenv("TEAM_STORE_URL", store)
    with create_defs_folder_sandbox() as sandbox:
        path = scaffold(sandbox)
        (path / "defs.yaml").write_text(textwrap.dedent("""\
            type: scrape_contracts.ScrapeContracts
            attributes:
              contracts_dir: contracts
              db_url: "{{ env.TEAM_STORE_URL }}"
              pages: pages
              group_name: web
            """))
        defs = load(sandbox, path)
        assert {spec.group_name for spec in defs.resolve_all_asset_specs()} == {"web"}
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            scrape(defs, "example", "product-1", instance)
        assert list((path / "pages").rglob("*.html.gz"))
    [row] = read_accepted("example", db_url=store).to_dict("records")
    assert (row["name"], row["price"]) == ("Desk lamp", 24.5)
    assert not (tmp_path / "from_env.db").exists() and not (tmp_path / "pages_from_env").exists()


def test_left_out_attributes_fall_back_to_the_settings_and_downstream_assets_read_accepted(home: Path) -> None:
    with create_defs_folder_sandbox() as sandbox:
        path = scaffold(sandbox)
        defs = load(sandbox, path)
        assert defs.resources["store"].db_url == f"sqlite:///{home / 'scrape_contracts.db'}"
        assert defs.resources["artifacts"].location == str(home / "artifacts")
        groups = {spec.key.to_user_string(): spec.group_name for spec in defs.resolve_all_asset_specs()}
        assert groups["scrape/example"] == groups["scrape/example/candidate"] == "example"
        # the docs' downstream assets, in the project's defs folder beside the component
        (sandbox.defs_folder_path / "prices.py").write_text(python_block("Downstream assets"))
        with sandbox.build_all_defs() as defs, dg.instance_for_test(temp_dir=str(home)) as instance:
            scrape(defs, "example", "product-1", instance)  # the scaffolded example runs offline as written
            accepted = defs.get_assets_def(dg.AssetKey(["scrape", "example"])).to_source_asset()
            mean = dg.materialize([defs.get_assets_def("mean_price"), accepted], instance=instance,
                                  resources=defs.resources)
            taxed = dg.materialize([defs.get_assets_def("price_with_tax"), accepted], instance=instance,
                                   resources=defs.resources, partition_key="product-1")
        assert mean.output_for_node("mean_price") == 24.5
        assert taxed.output_for_node("price_with_tax") == round(24.5 * 1.19, 2)
        assert contract_partitions("example", path / "contracts").get_partition_keys() == ["product-1"]
    assert read_accepted("example")["name"].tolist() == ["Desk lamp"]


def test_scaffold_points_at_an_existing_contracts_folder(home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    contracts = tmp_path / "our_contracts"
    contracts.mkdir()
    (contracts / "shop.yaml").write_text(PRODUCT_CONTRACT.format(
        name="shop", targets="  - url: https://shop.example.com/1\n    key: one", extra=""))
    monkeypatch.chdir(tmp_path)  # --contracts-dir is a path as typed, from where dg runs
    with create_defs_folder_sandbox() as sandbox:
        path = scaffold(sandbox, contracts_dir="our_contracts")
        assert not (path / "contracts").exists()
        keys = {spec.key.to_user_string() for spec in load(sandbox, path).resolve_all_asset_specs()}
        assert {"scrape/shop", "scrape/shop/candidate"} <= keys
        with pytest.raises(ValueError, match=r"--contracts-dir 'nowhere': .* is not a folder"):
            sandbox.scaffold_component(component_cls=ScrapeContracts, defs_path="other",
                                       scaffold_params={"contracts_dir": "nowhere"})


def test_a_contracts_dir_that_is_no_folder_names_the_defs_yaml(home: Path) -> None:
    with create_defs_folder_sandbox() as sandbox:
        path = scaffold(sandbox)
        (path / "defs.yaml").write_text("type: scrape_contracts.ScrapeContracts\nattributes:\n  contracts_dir: contrcts\n")
        with pytest.raises(Exception) as raised:
            load(sandbox, path)
    messages = []
    error: BaseException | None = raised.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    assert any(f"{path / 'defs.yaml'}: contracts_dir 'contrcts' resolves to {path / 'contrcts'}, which is not a "
               "folder" in m for m in messages), messages


def test_the_public_face_names_four_things_and_imports_no_dagster() -> None:
    assert scrape_contracts.__all__ == ["ScrapeContracts", "build_definitions", "contract_partitions",
                                        "read_accepted"]
    assert set(scrape_contracts.__all__) <= set(dir(scrape_contracts))
    assert issubclass(scrape_contracts.ScrapeContracts, dg.Component)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        scrape_contracts.nothing_here  # noqa: B018
    # the CLI and readers of accepted data import the package without paying for Dagster
    code = "import sys, scrape_contracts; from scrape_contracts import read_accepted; print('dagster' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=clean_env(PYTHONPATH=str(REPO)))
    assert done.stdout.strip() == "False", done.stderr
