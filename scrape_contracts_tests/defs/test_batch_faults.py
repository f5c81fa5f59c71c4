"""Faults under a batched run: a full disk for pages is one cause said once, and the batch says targets failed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.defs.history import batch_summaries
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.defs.test_batch import run_batch


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real file system with no space left: a 64 KiB tmpfs, filled (needs root to mount; skipped else)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_for_pages_is_one_cause_and_the_batch_says_its_targets_failed(
        sqlite_harness: Harness, site: Any, full_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    keys = [f"p{i}" for i in range(6)]
    for i, key in enumerate(keys):
        site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
    harness.write_product_contract("shop", {key: site.url(f"/p/{key}") for key in keys})
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(full_disk / "artifacts"))
    result = run_batch(harness, "shop")
    assert result.success  # a batched run ends green with per-target failures, as a backfill does
    [summary] = batch_summaries(harness.instance, "shop", [result.run_id])
    assert (summary["failed"], summary["targets_failed"]) == (6, True)
    [cause] = summary["failure_causes"]
    assert (cause["kind"], cause["targets"], len(cause["partitions"])) == ("no_space", 6, 5)
    assert cause["reason"] == (f"no space left on the device holding the pages ({full_disk / 'artifacts'}): "
                               "free space there or point SCRAPE_CONTRACTS_ARTIFACTS_DIR elsewhere")
    # each target's own line says the same, in one line, without errno or the temporary file's name
    assert {f["reason"] for f in summary["failures"]} == {cause["reason"]}
    assert harness.store.latest_accepted("shop", "p0") is None
