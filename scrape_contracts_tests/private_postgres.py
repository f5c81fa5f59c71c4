"""A throw-away PostgreSQL cluster of a test's own, for faults the machine's shared server must never see.

Stopping the server at 127.0.0.1:5432 would break every other test and job using it, so a test that stops
its database mid-run starts a cluster of its own: ``initdb`` and ``pg_ctl`` of the installed PostgreSQL, a
folder under the system's temp dir, a free loopback port, no Unix socket outside that folder. ``initdb``
refuses to run as root, so as root the cluster belongs to the ``postgres`` user (``runuser``). Stopped and
removed when the test ends, whatever happened.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """One private cluster: ``url`` (user postgres, trust, database postgres), ``stop`` and ``start``."""

    def __init__(self, bin_dir: Path, root: Path, owner: str | None) -> None:
        self.bin_dir, self.root, self.owner = bin_dir, root, owner
        self.data, self.log = root / "data", root / "server.log"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self.owner is not None:
            command = ["runuser", "-u", self.owner, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(f"{argv[0]} failed ({done.returncode}): {done.stdout}{done.stderr}\n{log}")
        return done

    def init(self) -> None:
        self._as_owner("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                       "--no-sync", "--no-instructions")

    def start(self) -> None:
        """Start it and wait until it accepts connections (``pg_ctl -w``)."""
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c full_page_writes=off "
                   "-c max_connections=60")
        self._as_owner("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "60",
                       "start")

    def stop(self) -> None:
        """Stop it as an operator would in a hurry (``-m fast``: open connections are cut, then it exits)."""
        self._as_owner("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def running(self) -> bool:
        status = subprocess.run(
            [*(["runuser", "-u", self.owner, "--"] if self.owner else []), str(self.bin_dir / "pg_ctl"),
             "-D", str(self.data), "status"], capture_output=True, check=False, stdin=subprocess.DEVNULL)
        return status.returncode == 0


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A running private cluster; skipped where PostgreSQL's server programs are not installed."""
    bin_dir = _bin_dir()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed here")
    owner = None
    if os.geteuid() == 0:  # initdb refuses root: the cluster is the postgres user's
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to own a private cluster")
        owner = "postgres"
    root = Path(tempfile.mkdtemp(prefix="sc-private-pg-"))
    if owner is not None:
        shutil.chown(root, owner)
    cluster = Cluster(bin_dir, root, owner)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        try:
            if cluster.data.exists() and cluster.running():
                cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)
