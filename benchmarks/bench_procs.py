"""Processes of the benchmark: a ``dagster-daemon`` started and stopped by its PID (and only the PIDs it started),
and the peak memory of a process tree sampled from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def proc_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, start time in ticks) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                continue
    return table


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    table = table if table is not None else proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Daemon:
    """``dagster-daemon run -w workspace.yaml`` for one instance; stopped by its PID (and the PIDs it started)."""

    def __init__(self, instance_env: Any, workdir: Path) -> None:
        self.instance_env = instance_env
        self.log_path = workdir / f"daemon-{instance_env.home.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> Daemon:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                env=self.instance_env.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self, timeout: float = 180.0) -> None:
        instance = self.instance_env.dagster_instance()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"dagster-daemon exited ({self.process.returncode}): {self.log_tail()}")
                if "QUEUED_RUN_COORDINATOR" in instance.get_daemon_heartbeats():
                    return
                time.sleep(0.5)
        finally:
            instance.dispose()
        raise RuntimeError(f"dagster-daemon sent no heartbeat within {timeout:.0f}s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        table = proc_table()
        started_by_daemon = {pid: table[pid][1] for pid in descendants(self.process.pid, table)}
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        # its code server and run workers: the same PIDs (same start time), and only those
        deadline = time.monotonic() + 10
        while started_by_daemon and time.monotonic() < deadline:
            table = proc_table()
            started_by_daemon = {p: t for p, t in started_by_daemon.items() if table.get(p, (0, None))[1] == t}
            time.sleep(0.2)
        for pid in started_by_daemon:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process = None


class PssSampler(threading.Thread):
    """Peak memory (PSS) of the processes doing the work, children (parse workers) included, from /proc.

    ``root``: the process whose tree is sampled; ``with_root``: whether it counts itself (the in-process command
    does the work; a daemon only starts the run workers). Processes whose command line names ``PLUMBING`` (the
    daemon's code server, resource tracker, log tailers) are left out. ``peak_kb``: the most memory the
    processes held at one moment; ``largest_kb``: the largest single process (its VmHWM).
    """

    PLUMBING = ("dagster-daemon", "api grpc", "resource_tracker", "watch_orphans", "tail -F")

    # Each sample reads five /proc files per process and the stat of every process on the machine: 20-40 ms of
    # CPU with a batched sweep's 35 processes, taken from the same 2 cores the measured command runs on (at
    # 0.2 s, about a sixth of a core). Twice a second still sees memory grow; the sampler's own CPU is printed.
    def __init__(self, root: int, *, with_root: bool, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.with_root = with_root
        self.interval = interval
        self.peak_kb = 0
        self.largest_kb = 0
        self.cpu: dict[tuple[int, str], tuple[str, float]] = {}  # (pid, start) → (role, CPU seconds last seen)
        # the database server's processes are not the command's children: their CPU since the sampler started
        # (a backend started meanwhile counts from 0, one already there from what it had used by then)
        self.database: dict[tuple[int, str], tuple[float, float]] = {}  # (pid, start) → (first, last) seconds
        self._started_ticks = _uptime_ticks()
        self._machine_before = machine_busy_seconds()
        self.machine_s: float | None = None
        self._stop_event = threading.Event()
        self.own_cpu_s = 0.0  # this thread's CPU: what measuring cost the machine

    def run(self) -> None:
        while not self._stop_event.is_set():
            began = time.thread_time()
            self.sample()
            self.own_cpu_s += time.thread_time() - began
            self._stop_event.wait(self.interval)

    def sample(self) -> None:
        tree = ([self.root] if self.with_root else []) + descendants(self.root)
        pids = [pid for pid in tree if not any(part in _cmdline(pid) for part in self.PLUMBING)]
        # PSS: a forked parse worker shares most of its pages with the forkserver it came from; RSS would count
        # them once per process
        self.peak_kb = max(self.peak_kb, sum(_pss_kb(pid) for pid in pids))
        self.largest_kb = max([self.largest_kb, *(status_kb(pid, "VmHWM") for pid in pids)])
        for pid in pids:
            seen = _cpu_seconds(pid)
            if seen is not None:
                self.cpu[(pid, seen[0])] = (_role(pid, self.root), seen[1])
        for key, seconds in _database_cpu().items():
            first = self.database.get(key, (None, 0.0))[0]
            if first is None:
                first = 0.0 if int(key[1]) >= self._started_ticks else seconds
            self.database[key] = (first, seconds)

    def cpu_line(self) -> str:
        """CPU seconds of each process seen (user + system, as last sampled: the last interval of a process
        may be missed), by role in order of start: what the command cost the machine, beside its wall-clock."""
        by_role: dict[str, list[float]] = {}
        for (_, _), (role, seconds) in sorted(self.cpu.items(), key=lambda kv: int(kv[0][1])):
            by_role.setdefault(role, []).append(seconds)
        total = sum(s for values in by_role.values() for s in values)
        database = sum(last - first for first, last in self.database.values())
        machine = "" if self.machine_s is None else (
            f"; the whole machine {self.machine_s:.1f}s ({os.cpu_count()} cores)")
        return f"CPU {total:.1f}s: " + ", ".join(
            f"{role} " + "+".join(f"{s:.1f}" for s in values) for role, values in by_role.items()) + (
            f"; PostgreSQL's processes {database:.1f}s" if self.database else "") + machine + (
            f"; this sampler {self.own_cpu_s:.1f}s")

    def stop(self) -> int:
        self._stop_event.set()
        self.join(timeout=5)
        self.machine_s = machine_busy_seconds() - self._machine_before
        return self.peak_kb


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> tuple[str, float] | None:
    """(start time in ticks, user + system CPU seconds) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[19], (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


def _uptime_ticks() -> int:
    with open("/proc/uptime") as fh:
        return int(float(fh.read().split()[0]) * _TICKS)


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy since it booted, all cores (``/proc/stat``: all but idle and
    iowait): the command, the database, the site, and whatever else runs beside them."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICKS


def _database_cpu() -> dict[tuple[int, str], float]:
    """(pid, start time in ticks) → user + system CPU seconds of each PostgreSQL process, from one read of
    its ``/proc/<pid>/stat`` (its name is there too, in parentheses)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                head, _, rest = fh.read().rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        if head.partition("(")[2] == "postgres" and len(fields) > 19:
            found[(int(entry.name), fields[19])] = (int(fields[11]) + int(fields[12])) / _TICKS
    return found


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "command"
    line = _cmdline(pid)
    if "multiprocessing.forkserver" in line:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            parent = 0
        # the forkserver's children are the parse workers and the fetching process (started last)
        return "workers" if "multiprocessing.forkserver" in _cmdline(parent) else "forkserver"
    return "other"


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return status_kb(pid, "VmRSS")


def status_kb(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (``VmRSS``, ``VmHWM``); 0 for a process gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"
