"""PostgreSQL stopped in the middle of a batch: `scrape-contracts run` says so in one line, loses nothing.

The database is a private cluster of the test's own (``private_postgres.py``): the machine's shared server
is never stopped. The instance is the shipped production profile (``deploy/dagster.postgres.yaml``) with the
project store in the same database, as docs/production.md sets it up. One target's page is held by the site
until the database has been stopped, so the batch is between two commits when it goes: the targets
committed before it are kept, and the next run, once the database is back, scrapes the rest once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from scrape_contracts_tests.conftest import clean_env, product_page, stop_daemon
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response
from scrape_contracts_tests.private_postgres import Cluster, private_cluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WAIT_S = 180.0
LEASE_S = "15"  # what the run that is stopped leaves behind: a held target, free again this long after
KEYS = [f"p{i}" for i in range(6)]
HELD = "p5"
DAGSTER_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - dagster - [A-Z]+ - ")


class Held:
    """A page answered only once ``let_go`` is called (or after WAIT_S, so nothing hangs for ever)."""

    def __init__(self, html: str) -> None:
        self.body, self.arrived, self._go = html.encode(), threading.Event(), threading.Event()

    def __call__(self, request: Request) -> Response:
        self.arrived.set()
        self._go.wait(WAIT_S)
        return Response(200, self.body)

    def let_go(self) -> None:
        self._go.set()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with private_cluster() as running:
        yield running


def _accepted(url: str) -> dict[str, int]:
    """partition → number of accepted versions of contract shop, read straight from the database."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("sc_accepted"):
                return {}
            rows = conn.execute(sa.text("SELECT partition, count(*) FROM sc_accepted WHERE contract = 'shop' "
                                        "GROUP BY partition")).all()
    finally:
        engine.dispose()
    return {partition: count for partition, count in rows}


def _wait_for(what: str, condition: Callable[[], Any], process: subprocess.Popen | None = None,
              said: tuple[Path, ...] = ()) -> Any:
    """``condition()``'s first true value; fails at once if ``process`` ended first, with what it wrote to
    the files ``said``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the command exited ({process.returncode}) while waiting for {what}:\n"
                                 + _tails(said))
        time.sleep(0.1)
    raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}:\n" + _tails(said))


def _tails(said: tuple[Path, ...]) -> str:
    return "\n".join(f"{path.name}: {path.read_text(errors='replace')[-3000:]}" for path in said if path.exists())


def _setup(tmp_path: Path, cluster: Cluster, site: FixtureSite) -> tuple[dict[str, str], Held]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    targets = "".join(f"  - url: {site.url('/p/' + key)}\n    key: {key}\n" for key in KEYS)
    (contracts / "shop.yaml").write_text(
        f"name: shop\ntargets:\n{targets}fetch:\n  allow_private_addresses: true\n  retries: 0\n"
        "  timeout_s: 120\n  deadline_s: 240\n"
        "fields:\n  title:\n    selector: '#title'\n  sku:\n    selector: '#sku'\n"
        "  price:\n    selector: '#price'\n    type: price\n")
    held = Held(product_page("Book 5", "BK-5", "$15.00"))
    for i, key in enumerate(KEYS):
        if key == HELD:
            site.set_handler(f"/p/{key}", held)
        else:
            site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
    env = clean_env(DAGSTER_HOME=str(home), DAGSTER_PG_URL=cluster.url, SCRAPE_CONTRACTS_DB_URL=cluster.url,
                    SCRAPE_CONTRACTS_DIR=str(contracts), SCRAPE_CONTRACTS_LEASE_SECONDS=LEASE_S,
                    SCRAPE_CONTRACTS_ARTIFACTS_DIR=str(home / "pages"),
                    PYTHONPATH=str(REPO), PATH=f"{BIN}:{os.environ['PATH']}")
    return env, held


def _command(env: dict[str, str], tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:  # files, not pipes nobody reads meanwhile
        process = subprocess.Popen([str(BIN / "scrape-contracts"), *argv], env=env, cwd=REPO, stdout=stdout,
                                   stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True)
    return process, out, err


def _stopped_mid_batch(cluster: Cluster, held: Held, process: subprocess.Popen, said: tuple[Path, ...]) -> None:
    """Once the batch has committed every target but the held one, stop the database, then let the held
    page go: the batch's next commit finds the database gone."""
    _wait_for("the batch to fetch the held page", held.arrived.is_set, process, said)
    _wait_for("the other targets to be committed", lambda: len(_accepted(cluster.url)) == len(KEYS) - 1,
              process, said)
    cluster.stop()
    held.let_go()


def _one_line(process: subprocess.Popen, out: Path, err: Path) -> str:
    try:
        process.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"the command did not end:\n{out.read_text()}\n{err.read_text()}") from None
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert process.returncode == 1, stdout + stderr
    assert "Traceback" not in stdout + stderr and "dagster_postgres" not in stdout + stderr, stdout + stderr
    # the run's own log lines (Dagster's console, one line each) and one error line, nothing else
    others = [line for line in stderr.splitlines() if not DAGSTER_LOG_LINE.match(line)]
    assert len(others) == 1 and others[0].startswith("error: "), stderr
    return others[0]


def _live_leases(url: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM sc_leases WHERE expires_at > now()")).scalar()
    finally:
        engine.dispose()


def _nothing_lost(cluster: Cluster, env: dict[str, str], tmp_path: Path) -> None:
    cluster.start()
    # what was committed before the stop is there, and the held target was not half-recorded
    assert _accepted(cluster.url) == {key: 1 for key in KEYS if key != HELD}
    # the held target's lease could not be released with the database gone: until it expires, the next run
    # reports that target busy (docs/leases.md); then it is free
    _wait_for("the stopped run's lease to expire", lambda: _live_leases(cluster.url) == 0)
    again = subprocess.run([str(BIN / "scrape-contracts"), "run", "shop"], env=env, cwd=REPO, check=False,
                           capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _accepted(cluster.url) == {key: 1 for key in KEYS}  # the rest once, nothing twice


def _kill_what_is_left(session: int) -> None:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and \
                    int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) == session:
                os.kill(int(entry.name), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            continue


def _line_when_stopped_mid_batch(env: dict[str, str], tmp_path: Path, cluster: Cluster, held: Any,
                                 *argv: str, logs: tuple[Path, ...] = ()) -> str:
    """The one line the command ``argv`` ends with when PostgreSQL stops in the middle of its batch."""
    process, out, err = _command(env, tmp_path, *argv)
    try:
        _stopped_mid_batch(cluster, held, process, (out, err, *logs))
        return _one_line(process, out, err)
    finally:
        held.let_go()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_postgresql_stopped_mid_batch_of_a_run_here_is_one_line(cluster: Cluster, site: FixtureSite,
                                                                tmp_path: Path) -> None:
    env, held = _setup(tmp_path, cluster, site)
    line = _line_when_stopped_mid_batch(env, tmp_path, cluster, held, "run", "shop")
    # the instance's storage or the project store, whichever failed first
    assert line.startswith("error: cannot use the "), line
    assert "run the command again" in line, line
    _nothing_lost(cluster, env, tmp_path)


def test_postgresql_stopped_mid_batch_of_a_queued_run_is_one_line_for_run_wait(cluster: Cluster,
                                                                             site: FixtureSite,
                                                                             tmp_path: Path) -> None:
    # the batch runs in a run worker that a real dagster-daemon launched; the command waits for it
    env, held = _setup(tmp_path, cluster, site)
    daemon_log = tmp_path / "daemon.log"  # said when the test fails: a daemon that never started a run
    with daemon_log.open("wb") as log:
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                                  env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        line = _line_when_stopped_mid_batch(env, tmp_path, cluster, held,
                                            "run", "shop", "--queue", "--wait", "--timeout", str(WAIT_S),
                                            logs=(daemon_log,))
    finally:
        stop_daemon(daemon)
        _kill_what_is_left(daemon.pid)  # its code server and the run worker it launched, if still there
    assert line.startswith("error: cannot use the Dagster instance's storage"), line
    assert "is running" in line and "run the command again" in line, line
    cluster.start()
    assert _accepted(cluster.url) == {key: 1 for key in KEYS if key != HELD}
