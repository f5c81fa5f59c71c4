"""datacontract-cli in a virtual environment of its own (its dependencies are not Dagster's), made once.

The environment is kept between test sessions in the system's temp folder, keyed by the pinned version
(``SCRAPE_CONTRACTS_DATACONTRACT_VENV`` overrides the place): installing it takes minutes, using it seconds.
A folder without its completion marker (an install that was killed) is made again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "1.2.8"
REQUIREMENT = f"datacontract-cli[postgres]=={VERSION}"


def venv_path() -> Path:
    default = Path(tempfile.gettempdir()) / f"scrape-contracts-datacontract-cli-{VERSION}"
    return Path(os.environ.get("SCRAPE_CONTRACTS_DATACONTRACT_VENV") or default)


def ensure_venv() -> Path:
    """The ``datacontract`` executable, installing it first if needed (under a lock: xdist workers share it)."""
    from filelock import FileLock

    root = venv_path()
    marker = root / ".installed"
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if not marker.exists():
            shutil.rmtree(root, ignore_errors=True)
            # the base interpreter, not this suite's virtualenv: nothing of Dagster's leaks in
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(root)], check=True, timeout=120)
            done = subprocess.run([str(root / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                                   REQUIREMENT], capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"pip install {REQUIREMENT} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            marker.write_text(REQUIREMENT + "\n")
    return root / "bin" / "datacontract"


def run(executable: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    # wide and plain: the result table is read by the test, not by a person at a terminal
    clean.update({"COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb", **(env or {})})
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=300, env=clean,
                          cwd=cwd)
