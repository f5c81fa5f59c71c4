"""`scrape-contracts run` with several batched runs: up to --parallel of them at once, each in its own process."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import dagster as dg
import pytest

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.launching import RunSpec, run_specs
from scrape_contracts.defs.run_processes import RunProcessError, execute_in_processes
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.fixture_site import Request, Response


def _shop(harness: Harness, site, monkeypatch: pytest.MonkeyPatch, count: int = 4) -> list[str]:
    for i in range(count):
        site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
    path = harness.write_product_contract("shop", {f"t{i}": site.url(f"/p/{i}") for i in range(count)})
    path.write_text(path.read_text() + "\nbatch_size: 1\n")
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    return ["--contracts-dir", str(harness.contracts_dir), "run", "shop"]


def _hold(site, i: int) -> tuple[threading.Event, threading.Event]:
    """Page ``/p/i`` answers only once ``release`` is set; ``entered`` is set when it is asked for."""
    entered, release = threading.Event(), threading.Event()
    body = product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00").encode()

    def held(_request: Request) -> Response:
        entered.set()
        release.wait(120)
        return Response(200, body, {"Content-Type": "text/html"})

    site.set_handler(f"/p/{i}", held)
    return entered, release


def _materialising_pids(instance: dg.DagsterInstance, key: str) -> dict[str, int]:
    """batch tag → the pid of the process that wrote the run's materialisations."""
    pids = {}
    for run in instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": key})):
        [pid] = {entry.dagster_event.pid for entry in instance.all_logs(run.run_id)
                 if entry.dagster_event is not None and entry.dagster_event.is_step_materialization}
        pids[run.tags["scrape_contracts/batch"]] = pid
    return pids


def test_batched_runs_run_two_at_a_time_by_default(harness: Harness, site, capsys,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    args = _shop(harness, site, monkeypatch)
    assert main([*args, "--idempotency-key", "sweep-1"]) == 0
    out = capsys.readouterr().out
    assert all(f"shop batch {i}/4 (1 targets): run" in out for i in range(1, 5)), out
    assert "accepted 4" in out
    pids = _materialising_pids(harness.instance, "sweep-1")
    assert len(pids) == 4
    # the command ran batches 1 and 3 itself, a second process batches 2 and 4
    assert pids["shop/1-of-4"] == pids["shop/3-of-4"] == os.getpid()
    assert pids["shop/2-of-4"] == pids["shop/4-of-4"] != os.getpid()
    assert sorted(v.partition for v in harness.store.latest_accepted_all("shop")) == ["t0", "t1", "t2", "t3"]
    # the same key starts nothing twice, whichever process ran the runs
    assert main([*args, "--idempotency-key", "sweep-1"]) == 0
    assert capsys.readouterr().out.count("already started") == 4


def test_parallel_1_runs_them_one_after_the_other_here(sqlite_harness: Harness, site, capsys,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    args = _shop(sqlite_harness, site, monkeypatch, count=2)
    assert main([*args, "--idempotency-key", "sweep-1", "--parallel", "1"]) == 0
    assert set(_materialising_pids(sqlite_harness.instance, "sweep-1").values()) == {os.getpid()}


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_wrong_parallel_is_one_line(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "shop", "--parallel", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{value!r} is not a number of processes (1 or more)" in err and "Traceback" not in err


def test_a_run_process_that_fails_says_which_runs_did_not_run(sqlite_harness: Harness, site,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The second process cannot run its share (here: a job its definitions do not have); the command's own
    share still runs, and the error names the runs left."""
    _shop(sqlite_harness, site, monkeypatch, count=2)
    loaded = load_contracts(sqlite_harness.contracts_dir).by_name()["shop"]
    first, second = run_specs(loaded, ["t0", "t1"], idempotency_key="k", all_targets=True)
    broken = RunSpec("no_such_job", second.run_id, second.tags, second.run_config, label="the broken batch")
    reported: list[str] = []
    with pytest.raises(RunProcessError) as failed:
        execute_in_processes(build_definitions(str(sqlite_harness.contracts_dir)), sqlite_harness.instance,
                             [first, broken], 2, lambda spec, run, new: reported.append(spec.label))
    assert "a run process failed" in str(failed.value) and "no_such_job" in str(failed.value)
    assert str(failed.value).endswith("not finished: the broken batch")
    assert reported == [first.label]
    run = sqlite_harness.instance.get_run_by_id(first.run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS


def test_when_the_command_stops_the_other_process_starts_no_other_run(sqlite_harness: Harness, site,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's own share breaks while the other process is inside its first run: that run ends as it
    would, and the process starts none of its other runs (its next word finds the command gone)."""
    _shop(sqlite_harness, site, monkeypatch, count=4)
    entered, release = _hold(site, 1)
    loaded = load_contracts(sqlite_harness.contracts_dir).by_name()["shop"]
    specs = run_specs(loaded, ["t0", "t1", "t2", "t3"], idempotency_key="k", all_targets=True)
    broken = RunSpec("no_such_job", specs[0].run_id, specs[0].tags, specs[0].run_config, label="broken")
    # shares: this process [broken, t2], the other process [t1, t3]
    before = set(multiprocessing.active_children())
    # the error is kept, with its traceback and the frames it holds (an embedding caller may keep it): the
    # other process must hear that the command stopped from the command, not from its pipe being collected
    with pytest.raises(dg.DagsterInvariantViolationError) as failed:
        execute_in_processes(build_definitions(str(sqlite_harness.contracts_dir)), sqlite_harness.instance,
                             [broken, *specs[1:]], 2, lambda *_: None)
    [other] = set(multiprocessing.active_children()) - before
    assert entered.wait(120), "the other process never fetched its first target"
    release.set()
    other.join(120)
    assert other.exitcode is not None and other.exitcode != 0
    first = sqlite_harness.instance.get_run_by_id(specs[1].run_id)
    assert first is not None and first.status == dg.DagsterRunStatus.SUCCESS
    assert sqlite_harness.accepted("shop", "t1")["price"] == 11.0
    assert sqlite_harness.instance.get_run_by_id(specs[3].run_id) is None
    assert sqlite_harness.instance.get_run_by_id(specs[2].run_id) is None
    assert "no_such_job" in str(failed.value)


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_ctrl_c_stops_the_sweep_and_says_what_did_not_start(parallel: str, sqlite_harness: Harness, site, capsys,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster ends a run that Ctrl-C interrupted as failed and returns; the command then starts no other run
    (it went on with the next ones before) and says so in one line, exit status 130."""

    args = _shop(sqlite_harness, site, monkeypatch, count=3)
    entered, release = _hold(site, 0)

    def press_ctrl_c() -> None:
        if entered.wait(120):
            os.kill(os.getpid(), signal.SIGINT)  # Dagster's handler takes it: the run is in this thread
        release.set()

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    code = main([*args, "--idempotency-key", "k", "--parallel", parallel])
    err = capsys.readouterr().err
    assert code == 130, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    # batch 1 is this process's in both cases; batch 3 is its next one (with --parallel 2, batch 2 is the other
    # process's, which Ctrl-C in a terminal reaches too; here only this process got the signal)
    assert "shop batch 1/3 (1 targets) was interrupted; not started: " in line and "batch 3/3" in line
    assert "--idempotency-key k starts the runs that did not start" in line and "Traceback" not in err
    # Dagster's failure of the interrupted step, in one line: its stack stays in the event log
    [failed] = [line for line in err.splitlines() if "STEP_FAILURE" in line]
    assert failed.endswith("(interrupted)") and "Stack Trace" not in err, err
    runs = {r.tags["scrape_contracts/batch"]: r for r in sqlite_harness.instance.get_runs(
        dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "k"}))}
    assert runs["shop/1-of-3"].status == dg.DagsterRunStatus.FAILURE and "shop/3-of-3" not in runs
