"""benchmarks/politeness.py: its site and bound are what it claims, and the script sweeps and reports.

The full benchmark (``python benchmarks/politeness.py``, with Scrapy) is run by hand; here its site is checked
and it runs on three hosts and a few pages, without Scrapy, on the laptop profile.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import politeness  # noqa: E402


def test_the_site_spreads_latencies_and_its_bound_is_the_busiest_host() -> None:
    site = politeness.make_site(32, 2400, 4, 0.02, 1.0, seed=7)
    latencies = sorted(plan.latency_s for plan in site.plans.values())
    assert latencies[0] == 0.05 and latencies[-1] == 0.8 and len(site.plans) == 32
    assert 2300 < sum(len(p) for p in site.paths.values()) < 2500
    assert 20 < sum(len(p.busy) for p in site.plans.values()) < 90  # about 2% answer 503 first
    busiest = max(site.plans, key=lambda h: (len(site.paths[h]) + len(site.plans[h].busy)) * site.plans[h].latency_s)
    plan = site.plans[busiest]
    assert site.bound() == pytest.approx((len(site.paths[busiest]) + len(plan.busy)) * plan.latency_s / 4)


@pytest.mark.slow
def test_the_benchmark_sweeps_a_small_site_and_reports_its_figures(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "politeness.py"), "--hosts", "3", "--pages",
                           "20", "--skip-scrapy", "--profile", "sqlite", "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "politeness bound:" in done.stdout
    rows = re.findall(r"scrape-contracts, (first|unchanged) \(sqlite\) .* pages (\d+)/(\d+)  max in flight per host "
                      r"(\d+)", done.stdout)
    assert [r[0] for r in rows] == ["first", "unchanged"], done.stdout
    for _, got, total, peak in rows:
        assert got == total and 1 <= int(peak) <= 4
    # each sweep's start, broken down from its run's events: found, and in the order they happen
    for row in json.loads((tmp_path / "out.json").read_text())["rows"]:
        parts = [row["to_run_start_s"], row["run_start_to_step_s"], row["step_to_plan_s"],
                 row["plan_to_first_request_s"]]
        assert all(part >= 0 for part in parts) and parts[0] > 0, row
