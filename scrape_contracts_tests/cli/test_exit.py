"""How the command's process ends: at once once its work is done (no teardown of every object it made),
with its output flushed and its exit status; through Python's ordinary exit while a thread of it still
works."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from scrape_contracts.cli import leave

    class Noted:
        def __del__(self):  # runs when Python's exit tears the module down
            sys.stdout.write("torn down\\n")

    kept = Noted()
    print("summary", flush=False)  # buffered: a pipe is not a terminal
    if sys.argv[1] == "thread":
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
    leave(3)
""")


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_the_command_ends_at_once_with_its_output_and_status_when_nothing_else_runs() -> None:
    done = _run("alone")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "summary\n"  # flushed, and no teardown of the objects (else "torn down" too)


def test_a_thread_still_working_is_waited_for_by_the_ordinary_exit() -> None:
    done = _run("thread")
    assert done.returncode == 3, done.stderr
    assert "summary\n" in done.stdout and "thread done\n" in done.stdout
