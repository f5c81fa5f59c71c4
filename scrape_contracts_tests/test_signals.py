"""The suite's processes start children that die of SIGTERM even when pytest was started with the stop signals
ignored or blocked (the CI run that hung: signals.py). Each case runs in a fresh interpreter, so this worker's
own signals are not touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# as the CI run's launcher left it (SIGHUP, SIGINT, SIGQUIT, SIGTERM ignored), SIGTERM blocked too; then a
# child, seen from /proc
CHILD = """
import json, signal, subprocess, sys
from scrape_contracts_tests.signals import restore_stop_signals
for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
restored = restore_stop_signals() if sys.argv[1] == "restore" else []
child = subprocess.Popen(["sleep", "600"])
status = dict(line.split(":\\t", 1) for line in open(f"/proc/{child.pid}/status").read().splitlines()
              if line.startswith(("SigIgn", "SigBlk")))
child.kill()
child.wait()
print(json.dumps({"restored": restored, "ignored": int(status["SigIgn"], 16),
                  "blocked": int(status["SigBlk"], 16)}))
"""


def _child_signals(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def _mask(*sigs: int) -> int:
    return sum(1 << (sig - 1) for sig in sigs)


def test_a_launcher_that_ignores_the_stop_signals_is_undone_before_children_start() -> None:
    left = _child_signals("as-launched")  # what every child started then inherited
    stop, hangup = _mask(signal.SIGINT, signal.SIGTERM), _mask(signal.SIGHUP)
    assert left["ignored"] & (stop | hangup) == stop | hangup and left["blocked"] & _mask(signal.SIGTERM)
    fixed = _child_signals("restore")
    assert fixed["restored"] == ["SIGINT ignored", "SIGTERM ignored", "SIGTERM blocked"]
    assert fixed["ignored"] & stop == 0 and fixed["blocked"] & stop == 0
    assert fixed["ignored"] & hangup  # a nohup run stays one


def test_the_test_processes_do_not_ignore_or_block_the_stop_signals() -> None:
    """conftest.py restored them at start (and fails a test that changes them); this worker's own state."""
    from scrape_contracts_tests.signals import stop_signals_disturbed

    assert not stop_signals_disturbed()
    child = subprocess.Popen(["sleep", "600"])
    try:
        child.terminate()
        assert child.wait(timeout=60) == -signal.SIGTERM  # at once; 60 s only for a loaded machine
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
