"""A command started with SIGINT ignored (a background job of a non-interactive shell) still dies of SIGTERM
after it has executed a run in process: Dagster gives SIGTERM SIGINT's disposition when such a run ends, and
``launching.run_in_process`` puts SIGTERM back. Each case runs in a fresh interpreter started with SIGINT
ignored, as such a shell starts it, so this worker's own signals are not touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, signal, sys
import dagster as dg
from scrape_contracts.defs.launching import run_in_process

@dg.op
def one():
    return 1

@dg.job
def tiny():
    one()

instance = dg.DagsterInstance.ephemeral()
before = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
if sys.argv[1] == "wrapped":
    ok = run_in_process(tiny, instance=instance).success
else:
    ok = tiny.execute_in_process(instance=instance).success
print(json.dumps({"ok": ok, "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
                  "sigterm_default_before": before,
                  "sigterm_ignored_after": signal.getsignal(signal.SIGTERM) == signal.SIG_IGN}))
"""


def _after_one_run(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True,
                          timeout=180, check=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_run_in_process_leaves_sigterm_as_the_command_started_with_it() -> None:
    wrapped = _after_one_run("wrapped")
    assert wrapped == {"ok": True, "sigint_ignored": True, "sigterm_default_before": True,
                       "sigterm_ignored_after": False}


def test_dagster_alone_makes_sigterm_ignored_which_is_why_the_wrapper_exists() -> None:
    # if a Dagster release stops copying SIGINT's disposition to SIGTERM, this fails and run_in_process can go
    plain = _after_one_run("plain")
    assert plain["ok"] and plain["sigint_ignored"] and plain["sigterm_default_before"]
    assert plain["sigterm_ignored_after"] is True
