"""A site host's fetch.concurrency holds across processes when the project store is PostgreSQL: two batched runs
(two `scrape-contracts run` processes, each with its own fetching process) on one host, and two single-target
runs side by side, seen from the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.defs.test_celery_chunks import wait_for
from scrape_contracts_tests.hosts_site import HostPlan, HostsSite

RUN_S = 240  # a bound against a hang for each `scrape-contracts run` (one took over 120 s at load 30)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_S)]

REPO = Path(__file__).resolve().parents[2]
A = "127.0.0.2"
TARGETS = 60


def _page(path: str) -> str:
    n = sum(map(ord, path)) % 90
    return product_page(f"Book {path}", f"BK-{n}", f"${10 + n}.00")


def _contract(folder: Path, name: str, site: HostsSite, concurrency: int) -> None:
    folder.mkdir()
    targets = "".join(f"  - url: {site.url(A, f'/{name}/{i}')}\n    key: t{i:02d}\n" for i in range(TARGETS))
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\ntargets:\n{targets}fetch:\n  allow_private_addresses: true\n  concurrency: {concurrency}\n"
        "  retries: 0\n  timeout_s: 60\n  deadline_s: 90\nfields:\n  title:\n    selector: h1\n  price:\n    selector: .price\n    type: number\n")


def _environment(tmp_path: Path, name: str, pg_database: str) -> dict[str, str]:
    home = tmp_path / f"home-{name}"  # a Dagster instance each; the project store is shared
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {**os.environ, "DAGSTER_HOME": str(home), "SCRAPE_CONTRACTS_DB_URL": pg_database,
            "SCRAPE_CONTRACTS_PARSE_WORKERS": "1", "PYTHONPATH": str(REPO)}


def test_two_runs_on_postgres_share_each_hosts_concurrency(tmp_path: Path, pg_database: str) -> None:
    ProjectStore(pg_database)  # migrated once, before the two processes open it
    # run one may send 2 at once, run two 4: the site holds the first pages until 4 are in flight at once,
    # which run one cannot do alone (its 2 and robots.txt), so the two runs fetch side by side; shared, they
    # never have more than 4 in flight (each on its own: 2 + 4)
    with HostsSite({A: HostPlan(page=_page, latency_s=0.05, hold_for=4, hold_timeout_s=60)}) as site:
        runs = []
        for name, concurrency in (("one", 2), ("two", 4)):
            if runs:  # run two starts once run one's two first pages wait at the site (up to their timeout_s)
                wait_for("run one's pages held at the site", lambda: site.peak(A) >= 2)
            _contract(tmp_path / name, name, site, concurrency)
            runs.append(subprocess.Popen(
                [sys.executable, "-c", "import sys; from scrape_contracts.cli import console; sys.exit(console())",
                 "--contracts-dir", str(tmp_path / name), "run", name, "--idempotency-key", name],
                env=_environment(tmp_path, name, pg_database), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = [run.communicate(timeout=RUN_S)[0].decode() for run in runs]
        assert [run.returncode for run in runs] == [0, 0], "\n".join(o[-1500:] for o in outputs)
        pages = [s for s in site.requests(A) if s.path != "/robots.txt"]
        assert len(pages) == 2 * TARGETS
        assert site.reached(A) and site.peak(A) == 4, site.peak(A)  # reached, and never more over both runs
        # the two runs fetched at the same time (else the bound above proves nothing)
        first_of_one = min((s for s in pages if s.path.startswith("/one/")), key=lambda s: s.start)
        assert any(s.start < first_of_one.end for s in pages if s.path.startswith("/two/"))


def test_single_target_runs_side_by_side_on_postgres_share_each_hosts_concurrency(
        tmp_path: Path, pg_database: str) -> None:
    ProjectStore(pg_database)
    # two contracts, fetch.concurrency 1, one target each on one host, run at once as single-target runs (a
    # UI launch beside a sensor's run): the site holds a first request until two are in flight (or 20 s),
    # which the runs reach only by exceeding the host's limit together
    with HostsSite({A: HostPlan(page=_page, latency_s=0.05, hold_for=2, hold_timeout_s=20)}) as site:
        runs = []
        for name in ("one", "two"):
            _contract(tmp_path / name, name, site, 1)
            runs.append(subprocess.Popen(
                [sys.executable, "-c", "import sys; from scrape_contracts.cli import console; sys.exit(console())",
                 "--contracts-dir", str(tmp_path / name), "run", name, "--partition", "t00"],
                env=_environment(tmp_path, name, pg_database), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = [run.communicate(timeout=RUN_S)[0].decode() for run in runs]
        assert [run.returncode for run in runs] == [0, 0], "\n".join(o[-1500:] for o in outputs)
        assert {s.path for s in site.requests(A)} >= {"/one/0", "/two/0"}
        assert not site.reached(A) and site.peak(A) == 1  # robots.txt and pages, one at a time over both runs
