"""benchmarks/multihost.py: it makes the hosts, sweeps with each number of them and reports the figures it
claims. The full benchmark (20,000 targets; docs/multihost.md) is run by hand; here two hosts, 40 targets."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scrape_contracts_tests.conftest import require_postgres
from scrape_contracts_tests.multihost.conftest import require_netns

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_benchmark_sweeps_with_two_hosts_and_reports_its_figures() -> None:
    require_netns()
    require_postgres()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "multihost.py"), "--targets", "40",
                           "--workers", "2", "--site-hosts", "2", "--concurrency", "2", "--chunks", "2"],
                          capture_output=True, text=True, timeout=560, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    [row] = re.findall(r"2 host\(s\): wall [\d.]+ s, runs [\d.]+ s, bound ([\d.]+) s -> ratio [\d.]+ "
                       r"\(wall\), [\d.]+ \(runs\); (\d+) accepted; shares (\{.*?\}); "
                       r"max in flight per site host (\d+) \(limit 2\)", done.stdout)
    bound, accepted, shares, peak = row
    # 20 pages on each site host, the slower one answering after 400 ms, two at a time
    assert float(bound) == pytest.approx(20 * 0.4 / 2)
    assert int(accepted) == 40
    assert sorted(ast.literal_eval(shares)) == ["a", "b"] and sum(ast.literal_eval(shares).values()) == 40
    assert 1 <= int(peak) <= 2
    [memory] = re.findall(r"peak memory per worker host \(all its processes, MB; processes then\): (.*)", done.stdout)
    per_host = dict(re.findall(r"(\w) (\d+) \(\d+\)", memory))
    # each host's worker (Python with Dagster and the job loaded) is some tens of MB at the least
    assert sorted(per_host) == ["a", "b"] and all(int(mb) > 30 for mb in per_host.values()), memory
