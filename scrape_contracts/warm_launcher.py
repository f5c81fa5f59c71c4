"""Dagster's ``DefaultRunLauncher``, with run workers forked from a warm process instead of a fresh Python.

Every run Dagster launches starts a new interpreter that imports Dagster, the libraries and the code
location before the first step: about 2.4 s on this machine, the largest fixed cost of a batched run
(README, "Scraping a large contract") and of every single-target materialisation. This launcher keeps one
process per Python executable that has imported all of that once (``scrape_contracts/warm_worker.py``) and
forks each run worker from it. A forked worker runs the run exactly as ``dagster api execute_run`` does, and
loads the contracts from disk itself, so an edited contract is what the next run scrapes; when this
package's source changes, the warm process is replaced before the next launch.

What else changes: the run's worker pid is a run tag, so termination interrupts that process (as Dagster's
code server does for its own workers) and run monitoring can tell a dead worker (killed, out of memory) from
a slow one: such a run fails within one monitoring interval instead of at ``max_runtime_seconds``. A run
whose code location is not a Python module this executable can import, or any failure of the warm process,
falls back to the default launch. ``SCRAPE_CONTRACTS_WARM_WORKERS=0`` turns it off.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster import DefaultRunLauncher
from dagster._core.launcher.base import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster._serdes import serialize_value
from dagster._serdes.config_class import ConfigurableClassData

PID_TAG = "scrape_contracts/worker_pid"
HOST_TAG = "scrape_contracts/worker_host"
_READY_TIMEOUT_S = 120.0  # a cold start of the warm process on a busy machine


def source_fingerprint(roots: list[Path]) -> tuple[int, int]:
    """(newest mtime in ns, number of files) of the Python sources under ``roots``: changes when code does."""
    newest, count = 0, 0
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    count += 1
                    newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    return newest, count


def _package_root() -> Path:
    return Path(__file__).resolve().parent


class WarmProcess:
    """One warm process: ask it for a run worker, get the worker's pid."""

    def __init__(self, executable: str, fingerprint: tuple[int, int]) -> None:
        self.executable = executable
        self.fingerprint = fingerprint
        # stderr is inherited: the workers' output goes where the daemon's goes, as with Dagster's own launch
        self.process = subprocess.Popen([executable, "-m", "scrape_contracts.warm_worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
        self._ready = False

    def _read_line(self, timeout: float) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not result or not result[0]:
            raise RuntimeError(f"the warm run-worker process (pid {self.process.pid}) did not answer")
        return result[0].strip()

    def ensure_ready(self) -> None:
        if not self._ready:
            if self._read_line(_READY_TIMEOUT_S) != "ready":
                raise RuntimeError("the warm run-worker process did not start")
            self._ready = True

    def start_worker(self, run_id: str, instance_ref: str, cwd: str | None, batch: bool) -> int:
        self.ensure_ready()
        self.process.stdin.write(json.dumps({"run_id": run_id, "instance_ref": instance_ref, "cwd": cwd,
                                             "batch": batch}) + "\n")
        self.process.stdin.flush()
        return int(self._read_line(30.0))

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Let it go: it exits when its stdin closes; the workers it forked keep running."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class WarmRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run workers fork from a warm process (same config: none)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(inst_data=inst_data)
        self._lock = threading.Lock()
        self._warm: dict[str, WarmProcess] = {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
                          ) -> WarmRunLauncher:
        return cls(inst_data=inst_data)

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("SCRAPE_CONTRACTS_WARM_WORKERS", "1").strip().lower() not in ("0", "false", "no")

    def _warm_for(self, executable: str) -> WarmProcess:
        fingerprint = source_fingerprint([_package_root()])
        warm = self._warm.get(executable)
        if warm is not None and (not warm.alive() or warm.fingerprint != fingerprint):
            warm.close()  # this package's code changed (or the process died): start from the new code
            warm = None
        if warm is None:
            warm = self._warm[executable] = WarmProcess(executable, fingerprint)
        return warm

    def prewarm(self) -> None:
        """Start the warm process now, in the background, instead of at the first launch: called as
        dagster-daemon starts (``queue.ScrapeRunCoordinator``), so the first run and the first command served
        by it (``warm_cli``) do not wait for its imports."""
        if not self.enabled():
            return

        def start() -> None:
            with self._lock:
                try:
                    self._warm_for(sys.executable).ensure_ready()
                except (OSError, RuntimeError):
                    # not ready in time: let it go, so the first launch starts a fresh one instead of reading
                    # an answer that a timed-out reader may take
                    warm = self._warm.pop(sys.executable, None)
                    if warm is not None:
                        warm.close()

        threading.Thread(target=start, name="warm-process-start", daemon=True).start()

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        origin = run.job_code_origin
        if not self.enabled() or origin is None:
            return super().launch_run(context)
        executable = origin.repository_origin.executable_path or sys.executable
        cwd = getattr(origin.repository_origin.code_pointer, "working_directory", None)
        ref = serialize_value(self._instance.get_ref())
        try:
            with self._lock:
                # a batched run's worker also forks the batch's workers before Dagster starts its threads
                pid = self._warm_for(executable).start_worker(run.run_id, ref, cwd,
                                                              batch=run.job_name.endswith("_batch_job"))
        except (OSError, RuntimeError, ValueError) as exc:
            with self._lock:
                warm = self._warm.pop(executable, None)
                if warm is not None:
                    warm.close()
            self._instance.report_engine_event(
                f"warm run worker unavailable ({exc}); launching a fresh one", run, cls=self.__class__)
            return super().launch_run(context)
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(pid), HOST_TAG: socket.gethostname()})
        self._run_ids.add(run.run_id)

    def _worker_pid(self, run_id: str) -> int | None:
        run = self._instance.get_run_by_id(run_id) if self.has_instance else None
        if run is None or PID_TAG not in run.tags or run.tags.get(HOST_TAG) != socket.gethostname():
            return None
        return int(run.tags[PID_TAG])

    def terminate(self, run_id: str) -> bool:
        pid = self._worker_pid(run_id)
        if pid is None:
            return super().terminate(run_id)
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        try:
            # what Dagster's code server does to its own workers: the run stops at its next step boundary
            # and ends CANCELED
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: Any) -> CheckRunHealthResult:
        pid = self._worker_pid(run.run_id)
        if pid is None:
            # not forked here (the default launch, another host): nothing to tell, as with DefaultRunLauncher,
            # which has no health check; UNKNOWN would make run monitoring fail a live run
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not a warm run worker of this host")
        if _is_worker(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone: killed, or out "
                                                         "of memory; launch the run again to finish it")

    def dispose(self) -> None:
        with self._lock:
            for warm in self._warm.values():
                warm.close()
            self._warm.clear()


def _is_worker(pid: int) -> bool:
    """Whether ``pid`` is a live run worker forked by a warm process (not a recycled pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"scrape_contracts.warm_worker" in handle.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: trust the pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
