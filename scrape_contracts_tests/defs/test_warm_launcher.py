"""The warm run launcher on a real instance and a real dagster-daemon: runs fork from one warm process, read
the contracts as they are on disk, can be terminated, and a killed worker is reported dead."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from dagster._core.launcher.base import WorkerStatus

from scrape_contracts.cli import main
from scrape_contracts.warm_launcher import PID_TAG, WarmRunLauncher, source_fingerprint
from scrape_contracts_tests.conftest import Harness, finished_run, product_page
from scrape_contracts_tests.fixture_site import Response

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return int(next(line for line in handle if line.startswith("PPid:")).split()[1])


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode()


def _started_worker(instance: dg.DagsterInstance, run_id: str, timeout: float = 60) -> int:
    """The worker pid of a run once it has started executing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status == dg.DagsterRunStatus.STARTED and PID_TAG in run.tags:
            return int(run.tags[PID_TAG])
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not start in {timeout}s")


def _engine_pid(instance: dg.DagsterInstance, run_id: str) -> int:
    [message] = [r.dagster_event.message for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
                 if (r.dagster_event.message or "").startswith("Started process for run (pid: ")]
    return int(message.split("pid: ")[1].rstrip(")."))


@pytest.mark.slow
def test_runs_fork_from_one_warm_process_and_read_contracts_from_disk(sqlite_harness: Harness, site, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    assert isinstance(harness.instance.run_launcher, WarmRunLauncher)
    release = threading.Event()

    def slow(_request: Any) -> Response:
        release.wait(10)  # the test looks at the worker while the run waits here
        return Response(200, product_page("Slow", "BK-9", "$9.00").encode())

    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    site.set_page("/p/2", product_page("Emma", "BK-2", "$20.00"))
    site.set_handler("/p/9", slow)
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p9": site.url("/p/9")})
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    run = ["--contracts-dir", str(harness.contracts_dir), "run", "shop"]
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert main([*run, "--partition", "p1", "--idempotency-key", "a", "--wait"]) == 0
        [first] = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "a"}))
        assert first.status == dg.DagsterRunStatus.SUCCESS and harness.accepted("shop", "p1")["price"] == 100.0
        # the worker that ran it is the one the launcher forked and tagged
        assert _engine_pid(harness.instance, first.run_id) == int(first.tags[PID_TAG])

        # a target added to the contract file after the warm process started: the next run knows it
        harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2"),
                                                "p9": site.url("/p/9")})
        assert main([*run, "--partition", "p2", "--idempotency-key", "b", "--wait"]) == 0
        assert harness.accepted("shop", "p2")["price"] == 20.0

        # while a run works, its worker is a child of the warm process, which is the daemon's child
        assert main([*run, "--partition", "p9", "--idempotency-key", "c"]) == 0
        [slow_run] = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "c"}))
        worker = _started_worker(harness.instance, slow_run.run_id)
        warm = _ppid(worker)
        assert "scrape_contracts.warm_worker" in _cmdline(warm) and _ppid(warm) == daemon.pid
        launcher = harness.instance.run_launcher
        live = harness.instance.get_run_by_id(slow_run.run_id)
        assert launcher.check_run_worker_health(live).status == WorkerStatus.RUNNING

        # killed (out of memory, say): run monitoring is told the worker is gone, not left waiting for it
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        health = launcher.check_run_worker_health(harness.instance.get_run_by_id(slow_run.run_id))
        assert health.status == WorkerStatus.FAILED and f"pid {worker}" in health.msg

        # terminating a run interrupts its worker, as Dagster's code server does with its own: a batch that
        # is waiting for the slow page ends CANCELED and accepts nothing
        # (one interrupt, like Dagster's: a step with a retry policy, the single-target fetch, would retry)
        asked = len(site.requests_to("/p/9"))
        assert main([*run, "--idempotency-key", "d"]) == 0
        [doomed] = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "d"}))
        deadline = time.monotonic() + 60
        while len(site.requests_to("/p/9")) == asked:
            assert time.monotonic() < deadline, "the batch never asked for the slow page"
            time.sleep(0.05)
        # its fetching workers were forked with it, not spawned (no Python start, no imports)
        worker = int(harness.instance.get_run_by_id(doomed.run_id).tags[PID_TAG])
        children = [_cmdline(pid) for pid in _children(worker)]
        # (beside them: Dagster's log capture, `tail -F` and watch_orphans.py)
        assert any("scrape_contracts.warm_worker" in c for c in children), children
        assert not any("multiprocessing" in c for c in children), children
        assert launcher.terminate(doomed.run_id)
        release.set()
        assert finished_run(harness.instance, doomed.run_id).status == dg.DagsterRunStatus.CANCELED
        assert harness.accepted("shop", "p9") is None
    finally:
        release.set()
        daemon.send_signal(signal.SIGINT)
        daemon.wait(timeout=30)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _ppid(int(entry)) == pid:
                    found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        return "scrape_contracts.warm_worker" in _cmdline(pid)
    except FileNotFoundError:
        return False


def test_source_fingerprint_changes_when_code_does(tmp_path: Path) -> None:
    """The launcher replaces its warm process when this package's source changes (a developer's edit)."""
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "a.py"
    module.write_text("x = 1\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    before = source_fingerprint([tmp_path])
    assert before[1] == 1
    os.utime(tmp_path / "pkg" / "notes.txt", ns=(10**19, 10**19))
    assert source_fingerprint([tmp_path]) == before  # only Python sources count
    os.utime(module, ns=(before[0] + 10**9, before[0] + 10**9))
    assert source_fingerprint([tmp_path]) != before
    (tmp_path / "pkg" / "b.py").write_text("")
    assert source_fingerprint([tmp_path])[1] == 2


def test_preloaded_code_location_is_used_only_while_the_contracts_folder_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm process loads the contracts once; a run forked from it reuses them only while every file of
    the folder is as it was, else the run reads them again."""
    from scrape_contracts import warm_worker
    from scrape_contracts.contract import loader

    folder = tmp_path / "contracts"
    folder.mkdir()
    contract = folder / "shop.yaml"
    text = ("name: shop\ntargets:\n  - url: http://127.0.0.1:9/a\n    key: a\n{more}fetch:\n"
            "  allow_private_addresses: true\nfields:\n  title:\n    selector: h1\n")
    contract.write_text(text.format(more=""))
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(folder))
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    threads = threading.active_count()
    try:
        warm_worker.preload_instance_modules()
        warm_worker.preload_code_location()
        preloaded = sys.modules[warm_worker.CODE_LOCATION]
        assert warm_worker._preloaded is not None
        assert threading.active_count() == threads  # the warm process must stay safe to fork

        warm_worker._forget_stale_code_location()  # what a forked run does first: nothing changed
        assert sys.modules[warm_worker.CODE_LOCATION] is preloaded

        contract.write_text(text.format(more="  - url: http://127.0.0.1:9/b\n    key: b\n"))
        warm_worker._forget_stale_code_location()  # the contract changed: load from disk
        assert warm_worker.CODE_LOCATION not in sys.modules
        [loaded] = loader.load_contracts().contracts
        assert [t.key for t in loaded.contract.static_targets] == ["a", "b"]

        # a copy that keeps size and mtime (rsync -a, cp -p) is still a change, for the child and for the warm
        # process's own reload
        warm_worker.preload_code_location()
        same_size = folder / "shop.yaml.new"
        same_size.write_text(contract.read_text().replace("selector: h1", "selector: h2"))
        os.utime(same_size, ns=(contract.stat().st_atime_ns, contract.stat().st_mtime_ns))
        os.replace(same_size, contract)
        warm_worker._forget_stale_code_location()
        assert warm_worker.CODE_LOCATION not in sys.modules
        warm_worker.preload_code_location()
        [loaded] = loader.load_contracts().contracts
        assert loaded.contract.fields["title"].selector == "h2"
        warm_worker._forget_stale_code_location()
        assert warm_worker.CODE_LOCATION in sys.modules

        # a folder that does not load is left to the runs (each reports it)
        contract.write_text("name: [broken\n")
        warm_worker.preload_code_location()
        assert warm_worker.CODE_LOCATION not in sys.modules and warm_worker._preloaded is None
        warm_worker._forget_stale_code_location()
        assert warm_worker.CODE_LOCATION not in sys.modules
    finally:
        sys.modules.pop(warm_worker.CODE_LOCATION, None)
        loader.forget_parsed()
