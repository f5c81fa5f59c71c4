"""Mistakes a user can make: one or two lines saying what to do, exit status 1 or 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrape_contracts import read_accepted
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.cli import main
from scrape_contracts.service.accepted import AcceptedDataError

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REVIEW = ["review", "accept", "books", "dune", "--reviewer", "alice", "--reason", "looked"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An instance folder with a project store that has seen the books contract, and nothing to review."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry: {enabled: false}\n")  # what the demo leaves there
    for name in ("SCRAPE_CONTRACTS_DB_URL", "SCRAPE_CONTRACTS_ARTIFACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(REPO / "contracts"))
    store = ProjectStore(f"sqlite:///{home / 'scrape_contracts.db'}")
    store.add_targets("books", {"x": "https://x.example/1"})
    return home


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.err.strip()


@pytest.mark.parametrize(("argv", "code", "says"), [
    (["run"], 2, "required: contract"),
    (["bogus"], 2, "invalid choice"),
    (["events", "books", "--after", "abc"], 2, "invalid int value"),
    (["events", "nosuch"], 1, "no valid contract named 'nosuch'"),
    (["--contracts-dir", "/nonexistent", "events", "books"], 1, "scrape-contracts validate"),
    (["events", "books", "--partition", "zz"], 2, "'books' has no target 'zz'"),
    (["resume", "books", "zz"], 2, "scrape-contracts targets list books"),
    (["run", "books", "--partition", "zz", "--idempotency-key", "k"], 2, "has no target 'zz'"),
    (["targets", "add", "books", "https://books.example.com/9.html"], 2, "add URLs to its YAML"),
    (REVIEW, 1, "books/dune has nothing quarantined to review"),
    (["run", "books", "--idempotency-key", "k", "--wait", "--timeout", "0"], 2,
     "must be more than 0 seconds"),
    (["run", "books", "--idempotency-key", "k", "--timeout", "soon"], 2, "not a number of seconds"),
    (["run", "books", "--idempotency-key", "k", "--workspace", "/nonexistent/workspace.yaml"], 2,
     "no workspace file at /nonexistent/workspace.yaml"),
    (["dev", "--workspace", "nope.yaml"], 2, "no workspace file at nope.yaml"),
    (["review", "accept", "books", "dune", "--reviewer", " ", "--reason", "r"], 2,
     "--reviewer: must not be empty"),
])
def test_user_errors_are_one_line(home: Path, capsys, argv: list[str], code: int, says: str) -> None:
    got, err = _cli(argv, capsys)
    assert (got, len(err.splitlines())) == (code, 1), err
    assert says in err


@pytest.mark.parametrize("argv", [["events", "books"], ["selectors", "books"], REVIEW,
                                  ["targets", "list", "jobs"]])
def test_wrong_home_names_the_setting_and_creates_nothing(tmp_path: Path, monkeypatch, capsys,
                                                          argv: list[str]) -> None:
    monkeypatch.delenv("SCRAPE_CONTRACTS_DB_URL", raising=False)
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(REPO / "contracts"))
    wrong = tmp_path / "typo_home"
    monkeypatch.setenv("DAGSTER_HOME", str(wrong))
    code, err = _cli(argv, capsys)
    assert code == 1 and len(err.splitlines()) == 1
    assert f"DAGSTER_HOME={wrong}" in err and "SCRAPE_CONTRACTS_DB_URL" in err
    assert not (wrong / "scrape_contracts.db").exists()


def test_unreachable_database_names_the_setting(home: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", "postgresql://scraper:secret@127.0.0.1:1/store")
    code, err = _cli(["events", "books"], capsys)
    assert code == 1 and len(err.splitlines()) == 1
    assert "SCRAPE_CONTRACTS_DB_URL" in err and "secret" not in err


def test_review_refusal_prints_one_line_and_no_dagster_log(home: Path) -> None:
    """As a user runs it: a refused decision is the reason, not Dagster's DEBUG output and stack traces."""
    done = subprocess.run([str(BIN / "scrape-contracts"), *REVIEW], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ), cwd=home)
    assert done.returncode == 1
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "nothing quarantined" in done.stderr and "DEBUG" not in done.stderr


def test_read_accepted_from_a_foreign_folder(tmp_path: Path, monkeypatch) -> None:
    for name in ("DAGSTER_HOME", "SCRAPE_CONTRACTS_DB_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AcceptedDataError) as error:
        read_accepted("books")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "DAGSTER_HOME" in message and str(tmp_path) in message
    assert not (tmp_path / ".dagster_home").exists()


def test_read_accepted_with_a_wrong_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SCRAPE_CONTRACTS_DB_URL", raising=False)
    wrong = tmp_path / "elsewhere"
    wrong.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(wrong))
    with pytest.raises(AcceptedDataError, match=f"DAGSTER_HOME={wrong}"):
        read_accepted("books")
    assert list(wrong.iterdir()) == []
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", f"sqlite:///{wrong / 'nothing.db'}")
    with pytest.raises(AcceptedDataError, match="set SCRAPE_CONTRACTS_DB_URL"):
        read_accepted("books")
    assert list(wrong.iterdir()) == []


def test_read_accepted_of_an_unknown_contract(home: Path) -> None:
    with pytest.raises(AcceptedDataError) as error:
        read_accepted("bokos")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "no contract 'bokos'" in message and "known: books" in message
    assert read_accepted("books").empty  # known, nothing accepted yet: an empty table is the truth


def test_read_accepted_from_an_empty_postgres_database(pg_database: str, monkeypatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", pg_database)
    with pytest.raises(AcceptedDataError, match="no scrape_contracts tables.*set SCRAPE_CONTRACTS_DB_URL"):
        read_accepted("books")
    import sqlalchemy as sa

    engine = sa.create_engine(pg_database)
    with engine.connect() as conn:
        assert not sa.inspect(conn).has_table("sc_candidates")  # reading created nothing
    engine.dispose()


def test_events_with_a_limit_above_dagsters_page_size(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Dagster returns at most 10,000 records per call; --limit 100000 raised its invariant error
    code, err = _cli(["events", "books", "--limit", "100000"], capsys)
    assert code == 0 and err == ""
    code, err = _cli(["events", "books", "--limit", "0"], capsys)
    assert code == 2 and "must be 1 or more" in err


def test_dev_without_an_instance_says_to_run_the_demo(tmp_path: Path, monkeypatch, capsys) -> None:
    for name in ("DAGSTER_HOME", "SCRAPE_CONTRACTS_DB_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code, err = _cli(["dev"], capsys)
    assert code == 1 and len(err.splitlines()) == 1
    assert "run `scrape-contracts demo` here first" in err and str(tmp_path) in err


def test_run_wait_without_a_daemon_gives_up_with_how_to_start_one(demo_home: Path) -> None:
    """The demo's instance queues runs; with no dagster-daemon nothing starts them: --wait ends, not hangs."""
    started = time.monotonic()
    done = subprocess.run([str(BIN / "scrape-contracts"), "run", "books", "--partition", "dune",
                           "--idempotency-key", "no-daemon", "--queue", "--wait", "--timeout", "3"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=REPO)
    took = time.monotonic() - started  # ends, not hangs: the timeout above; how soon depends on the load
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "still queued after 3s and no dagster-daemon is running" in done.stderr
    assert "dagster-daemon run -w workspace.yaml" in done.stderr and "run this command again" in done.stderr
    assert "waiting up to 3s" in done.stdout
    assert took >= 3  # it waited the 3 s it was given before giving up
    import dagster as dg

    run = dg.DagsterInstance.get().get_run_by_id(done.stdout.split("queued run ")[1].split()[0])
    assert run.status == dg.DagsterRunStatus.QUEUED  # still there for a daemon and the same command again


def test_run_with_a_workspace_that_does_not_load(home: Path, tmp_path: Path, capsys) -> None:
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text("load_from:\n  - python_module: no_such_module_xyz\n")
    code, err = _cli(["run", "books", "--partition", "dune", "--idempotency-key", "k", "--queue", "--workspace",
                      str(workspace)], capsys)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert f"cannot queue the runs with the code location of {workspace}" in err and "no_such_module_xyz" in err


def test_the_command_exits_with_mains_status_and_everything_printed(home: Path) -> None:
    """The installed command skips the interpreter's teardown (cli.console): its status and its whole output
    must still come through, through a pipe too, and an exit handler still runs."""
    script = str(BIN / "scrape-contracts")
    ok = subprocess.run([script, "validate"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.count("\n") >= 3 and ok.stdout.endswith("\n"), ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "3 valid contract(s), 0 error(s)"  # the last line, flushed
    refused = subprocess.run([script, *REVIEW], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr
    marker = home / "atexit-ran"
    code = ("import atexit, sys; from scrape_contracts import cli; "
            f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes')); sys.argv = ['x', 'validate']; "
            "cli.console()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and marker.read_text() == "yes", done.stderr


@pytest.mark.parametrize("reason, held_back", [
    # what Dagster 1.13 writes (dagster/_core/instance/types.py) when a run's log line cannot be written
    ("(psycopg2.InterfaceError) connection already closed\n(Background on this error at: "
     "https://sqlalche.me/e/20/rvf5)", True),
    ("(psycopg2.OperationalError) connection to server at \"127.0.0.1\", port 5432 failed: "
     "Connection refused", True),
    ("too many retries for DB connection", True),
    ("maximum recursion depth exceeded", False),  # not the database: the user should see it
])
def test_dagster_report_of_a_log_line_lost_with_the_database_is_held_back(reason: str,
                                                                           held_back: bool) -> None:
    import io

    from scrape_contracts.cli.common import WithoutEventLogFailures

    seen = io.StringIO()
    stream = WithoutEventLogFailures(seen)
    stream.write(f"Exception while writing logger call to event log: {reason}\n")
    stream.write("error: cannot use the Dagster instance's storage ...\n")
    lines = seen.getvalue().splitlines()
    assert lines[-1].startswith("error: ")
    assert (len(lines) == 1) is held_back, lines
