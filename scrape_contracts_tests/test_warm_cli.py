"""``scrape-contracts run`` served by the warm process (scrape_contracts/warm_cli.py), on a real instance: the
command's output, exit status and runs are the ones a local command gives, an edited contracts folder is read
again, and whenever the warm process cannot serve the command runs locally."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from scrape_contracts import warm_cli, warm_worker
from scrape_contracts.warm_launcher import _package_root, source_fingerprint
from scrape_contracts_tests.conftest import Harness, product_page

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# the client alone, saying whether the warm process took the command
CLIENT = ("import sys\nfrom scrape_contracts import warm_cli\ncode = warm_cli.try_warm(sys.argv[1:])\n"
          "sys.stderr.write('[served]' if code is not None else '[local]')\nsys.exit(code or 0)\n")


@pytest.fixture
def warm(sqlite_harness: Harness) -> Iterator[Callable[[], subprocess.Popen]]:
    """Starts a warm process for the harness's instance and contracts folder, as the daemon's launcher does
    (it loads the contracts there as they are when it starts), serving commands."""
    started = []

    def start() -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "scrape_contracts.warm_worker"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, cwd=REPO, start_new_session=True,  # as the daemon's
                                   env={**os.environ, "SCRAPE_CONTRACTS_DIR": str(sqlite_harness.contracts_dir)})
        started.append(process)
        assert process.stdout.readline() == b"ready\n"
        assert os.path.exists(warm_cli.socket_path(os.environ["DAGSTER_HOME"]))
        return process

    yield start
    for process in started:
        process.stdin.close()  # how the launcher lets it go
        process.wait(timeout=30)
    # it removed its socket on the way out
    assert not os.path.exists(warm_cli.socket_path(os.environ["DAGSTER_HOME"]))


def _client(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLIENT, *args], cwd=REPO, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


def _runs(instance: dg.DagsterInstance, key: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": key})))


def test_a_served_run_command_launches_the_runs_a_local_one_would(sqlite_harness: Harness, site, warm) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/1")})
    warm()
    contracts = ["--contracts-dir", str(harness.contracts_dir)]

    served = _client(*contracts, "run", "shop", "--idempotency-key", "k1")
    assert served.stderr.endswith("[served]"), served.stderr
    assert served.returncode == 0
    # printed by the child straight to this command's stdout (no daemon here: the run waits in the queue)
    [run] = _runs(harness.instance, "k1")
    assert f"shop batch 1/1 (2 targets): launched run {run.run_id} (QUEUED)" in served.stdout
    assert run.job_name == "scrape_shop_batch_job" and run.status == dg.DagsterRunStatus.QUEUED

    # the same command run locally finds that very run: same run ids, same tags
    local = subprocess.run([str(BIN / "scrape-contracts"), *contracts, "run", "shop", "--idempotency-key", "k1"],
                           cwd=REPO, env={**os.environ, "SCRAPE_CONTRACTS_WARM_CLI": "0"}, capture_output=True,
                           text=True, timeout=120)
    assert local.returncode == 0, local.stderr
    assert f"already launched with this key: run {run.run_id}" in local.stdout
    assert len(_runs(harness.instance, "k1")) == 1


def test_a_contract_added_after_the_warm_process_loaded_is_found(sqlite_harness: Harness, site, warm) -> None:
    """The warm process loaded the folder with one contract; a command after a second one appeared must create
    that contract's run (a stale code location has no such job and the launch would fail)."""
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    warm()
    contracts = ["--contracts-dir", str(harness.contracts_dir)]
    assert _client(*contracts, "run", "shop", "--idempotency-key", "a").returncode == 0
    harness.write_product_contract("books", {"b1": site.url("/p/1")})

    served = _client(*contracts, "run", "books", "--idempotency-key", "b")
    assert served.stderr.endswith("[served]") and served.returncode == 0, served.stderr
    [run] = _runs(harness.instance, "b")
    assert run.job_name == "scrape_books_batch_job"


def test_errors_and_exit_status_are_the_commands_own(sqlite_harness: Harness, site, warm) -> None:
    harness = sqlite_harness
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    warm()
    contracts = ["--contracts-dir", str(harness.contracts_dir)]

    unknown = _client(*contracts, "run", "nosuch", "--idempotency-key", "x")
    assert unknown.stderr.startswith("error: no valid contract named 'nosuch' (valid contracts: shop)")
    assert unknown.stderr.endswith("[served]") and unknown.returncode == 1
    assert "Traceback" not in unknown.stderr

    usage = _client(*contracts, "run", "shop")  # no --idempotency-key: argparse's exit 2
    assert "the following arguments are required: --idempotency-key" in usage.stderr
    assert usage.stderr.endswith("[served]") and usage.returncode == 2


def test_the_command_runs_locally_when_nothing_serves_it(sqlite_harness: Harness, tmp_path: Path) -> None:
    sqlite_harness.write_product_contract("shop", {"p1": "http://127.0.0.1:9/p/1"})
    args = ["--contracts-dir", str(sqlite_harness.contracts_dir), "run", "shop", "--idempotency-key", "k"]
    # no warm process at all
    assert _client(*args).stderr == "[local]"
    # a socket left behind by a killed warm process: nobody listens
    path = warm_cli.socket_path(os.environ["DAGSTER_HOME"])
    assert warm_cli._private_folder(create=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    try:
        assert _client(*args).stderr == "[local]"
    finally:
        os.unlink(path)
    # commands that are not served, and the switch
    assert warm_cli.command_of(["--contracts-dir", "x", "run", "shop"]) == "run"
    assert warm_cli.command_of(["--contracts-dir=x", "review", "list"]) == "review"
    assert warm_cli.command_of(["--help"]) is None
    assert warm_cli.try_warm(["validate"]) is None


def test_the_switch_and_another_pythonpath_run_it_locally(sqlite_harness: Harness, site, warm) -> None:
    sqlite_harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    warm()
    args = ["--contracts-dir", str(sqlite_harness.contracts_dir), "run", "shop", "--idempotency-key", "k"]
    assert _client(*args, SCRAPE_CONTRACTS_WARM_CLI="0").stderr == "[local]"
    # the warm process declines a command whose modules could resolve differently
    assert _client(*args, PYTHONPATH=str(sqlite_harness.contracts_dir)).stderr == "[local]"
    assert _client(*args).stderr.endswith("[served]")


def test_a_warm_process_whose_code_changed_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_worker, "_source", source_fingerprint([_package_root()]))
    assert warm_worker._code_changed() is None
    monkeypatch.setattr(warm_worker, "_source", (0, 0))
    assert "source changed" in warm_worker._code_changed()


def test_ctrl_c_in_the_client_interrupts_the_served_command(sqlite_harness: Harness, site, warm) -> None:
    """``run --wait`` with no daemon waits for the queue; Ctrl-C stops it as it stops a local command: the
    traceback, and the client dies of SIGINT (a shell script stops there). The command's process is in a
    session of its own, out of reach of signals meant for the daemon's."""
    import signal
    import time

    sqlite_harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    process = warm()
    client = subprocess.Popen([sys.executable, "-c", CLIENT, "--contracts-dir", str(sqlite_harness.contracts_dir),
                               "run", "shop", "--idempotency-key", "k", "--wait", "--timeout", "300"],
                              cwd=REPO, env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "launched run" in client.stdout.readline()
        time.sleep(0.5)  # waiting for the queue now
        [child] = [pid for pid in _children(process.pid)]
        assert os.getpgid(child) == child != os.getpgid(process.pid)
        # Ctrl-C in the daemon's terminal stops the daemon and its warm process, not a command of another one
        os.killpg(os.getpgid(process.pid), signal.SIGINT)
        time.sleep(0.5)
        assert client.poll() is None
        client.send_signal(signal.SIGINT)
        assert client.wait(timeout=30) == -signal.SIGINT
        assert "KeyboardInterrupt" in client.stderr.read()
    finally:
        client.kill()


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError):
                pass
    return found


def test_the_clients_umask_and_output_encoding_hold(sqlite_harness: Harness, site, warm) -> None:
    sqlite_harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    warm()
    contracts = ["--contracts-dir", str(sqlite_harness.contracts_dir)]
    served = subprocess.run([sys.executable, "-c", CLIENT, *contracts, "run", "shop", "--idempotency-key", "u"],
                            cwd=REPO, env={**os.environ}, capture_output=True, timeout=120,
                            preexec_fn=lambda: os.umask(0o077))
    assert served.stderr.endswith(b"[served]") and served.returncode == 0
    [run] = _runs(sqlite_harness.instance, "u")
    [event_log] = list(Path(os.environ["DAGSTER_HOME"]).rglob(f"{run.run_id}.db"))
    assert event_log.stat().st_mode & 0o077 == 0  # written by the served child under the client's umask

    latin = subprocess.run([sys.executable, "-c", CLIENT, *contracts, "run", "café", "--idempotency-key", "e"],
                           cwd=REPO, env={**os.environ, "PYTHONIOENCODING": "latin-1"}, capture_output=True,
                           timeout=120)
    assert latin.stderr.endswith(b"[served]")
    assert b"no valid contract named 'caf\xe9'" in latin.stderr
