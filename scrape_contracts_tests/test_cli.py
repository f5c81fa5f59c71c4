"""The README's commands: the demo and the code location, run as a newcomer would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.cli import main

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_demo_tells_the_whole_story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for name in ("SCRAPE_CONTRACTS_DB_URL", "SCRAPE_CONTRACTS_ARTIFACTS_DIR", "SCRAPE_CONTRACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    home = tmp_path / ".dagster_home"
    assert f"DAGSTER_HOME={home}" in out and "dagster dev" in out
    store = ProjectStore(f"sqlite:///{home / 'scrape_contracts.db'}")
    # healed: ids and classes changed, data-field/itemprop anchors kept
    dune = store.latest_accepted("books", "dune")
    assert dune.version == 2 and dune.record["price"] == 13.49
    assert store.latest_candidate("books", "dune").outcome == "healed"
    assert [v.source for v in store.selector_history("books")] == ["contract", "heal"]
    # quarantined, then accepted by the reviewer
    neuromancer = store.latest_accepted("books", "neuromancer")
    assert (neuromancer.record["price"], neuromancer.source, neuromancer.reviewer) == (29.0, "review", "demo")
    # exhausted: the job board removed the facts; three refusals pause the targets, the data survives
    for key, record in {t: store.latest_accepted("jobs", t).record for t in store.list_targets("jobs")}.items():
        state = store.state("jobs", key)
        assert state.paused and "healing budget exhausted" in state.pause_reason
        assert record["salary"] in (72000, 58000)
    assert "valid → healed" in out and "review_required → accepted by reviewer" in out
    # the trail the demo points at
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["events", "books", "--partition", "neuromancer"]) == 0
    trail = capsys.readouterr().out
    for stage in ("violation_found", "check_failed", "quarantined", "reviewed", "accepted"):
        assert stage in trail
    lines = [line for line in trail.splitlines() if line.strip()]
    middle = int(lines[len(lines) // 2].split()[0])
    assert main(["events", "books", "--partition", "neuromancer", "--after", str(middle)]) == 0
    resumed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert resumed[:-1] == [line for line in lines[:-1] if int(line.split()[0]) > middle]
    assert main(["events", "books", "--partition", "dune"]) == 0
    trail = capsys.readouterr().out
    for stage in ("required_fields_present", "healing", "re_extracted", "accepted"):
        assert stage in trail
    assert main(["selectors", "books"]) == 0
    assert "healed in run" in capsys.readouterr().out


def test_code_location_loads(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run([str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def test_console_script_is_installed() -> None:
    done = subprocess.run([str(BIN / "scrape-contracts"), "validate"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "2 valid contract(s), 0 error(s)" in done.stdout


def test_healing_benchmark_meets_its_targets() -> None:
    """The README's benchmark command; it prints healing and naive figures side by side."""
    done = subprocess.run([sys.executable, "benchmarks/healing.py"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("healing: correct=") and " wrong=0.0% " in lines[0]
    assert lines[1].startswith("naive:   correct=")
    assert "TARGETS MET" in done.stdout
