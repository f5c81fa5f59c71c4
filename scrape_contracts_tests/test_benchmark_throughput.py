"""benchmarks/throughput.py and its site generator: the site is what it claims, the script measures and checks.

The full benchmark (``python benchmarks/throughput.py --pages 2000``) is run by hand; here it runs with a
tiny N and every path on the laptop profile (the raw loop, single-partition runs, the in-process command, the
command with ``--queue --wait`` under the dagster-daemon it starts and stops), and must print its figures and
find every value correct.
"""

from __future__ import annotations

import os

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import sitegen  # noqa: E402
import throughput  # noqa: E402


def test_site_is_deterministic_sized_and_holds_decoys(tmp_path: Path) -> None:
    first = sitegen.generate_site(tmp_path / "a", 30, seed=3)
    second = sitegen.generate_site(tmp_path / "b", 30, seed=3)
    formats = set()
    for key, product in first.products.items():
        page = (first.root / product.path.lstrip("/")).read_bytes()
        assert page == (second.root / second.products[key].path.lstrip("/")).read_bytes()
        assert sitegen.MIN_BYTES <= len(page) <= sitegen.MAX_BYTES
        text = page.decode()
        assert text.count('class="price__now"') >= 5  # the price plus related-product decoys
        assert text.count('itemprop="sku"') >= 5
        formats.add(product.price_format)
    assert set(first.truth()["p00001"]) == set(sitegen.FIELDS)
    assert len(formats) >= 5


@pytest.mark.parametrize("amount, fmt", [(1299.0, "usd"), (1299.0, "eur_de"), (12.5, "gbp"), (45.0, "usd_code"),
                                          (12.5, "eur_code"), (1299.0, "eur_fr"), (1299.0, "chf")])
def test_raw_baseline_reads_every_price_format(amount: float, fmt: str) -> None:
    assert throughput.parse_price(sitegen.render_price(amount, fmt)) == amount


@pytest.mark.parametrize("kind", ["python", "nginx"])
def test_server_answers_304_on_either_validator_and_sees_changes(tmp_path: Path, kind: str) -> None:
    if kind == "nginx" and sitegen.nginx_binary() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but nginx is not installed: .ci/run must install nginx-light")
        pytest.skip("nginx is not installed (apt-get install -y nginx-light)")
    site = sitegen.generate_site(tmp_path / "site", 10, seed=1)
    with sitegen.SiteServer(site.root, kind) as server, httpx.Client() as client:
        assert server.kind == kind and server.base_url.startswith("http://127.0.0.1:")
        url = server.base_url + site.products["p00002"].path
        first = client.get(url)
        assert first.status_code == 200 and first.headers["etag"] and first.headers["last-modified"]
        assert client.get(url, headers={"If-None-Match": first.headers["etag"]}).status_code == 304
        assert client.get(url, headers={"If-Modified-Since": first.headers["last-modified"]}).status_code == 304
        changed, touched = sitegen.mutate_site(site, seed=1, round_no=1, changed=0.2, touched=0.2)
        for key in changed + touched:
            path = site.products[key].path
            again = client.get(server.base_url + path, headers={"If-None-Match": first.headers["etag"]})
            assert again.status_code == 200
        pid = server.pid
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped


@pytest.mark.slow
@pytest.mark.timeout(900)  # four commands, a daemon and a dozen Python starts: minutes on a loaded machine
def test_benchmark_runs_small_and_every_value_is_correct(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "benchmarks/throughput.py", "--pages", "40", "--sample", "2", "--skip-postgres",
         "--json", str(tmp_path / "figures.json")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=840)
    except subprocess.TimeoutExpired:
        # SIGTERM, not the SIGKILL of subprocess.run's timeout: the benchmark then stops its daemon and server
        process.terminate()
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"the benchmark took more than 840 s:\n{(stdout + stderr)[-4000:]}")
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"^server: (nginx|python) ", done.stdout, re.M), out
    assert "every extracted value correct" in done.stdout, out
    rows = re.findall(r"^(\(\w\) [^\n]*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|-)\s+(\d+|-)\s+(\d+)/(\d+)$",
                      done.stdout, re.M)
    paths = {row[0].strip()[:3] for row in rows}
    assert paths == {"(a)", "(d)", "(b)", "(c)", "(q)", "(r)"}, out
    assert re.search(r"^\(q\) queued, first sweep \(sqlite\):\n\$ .* --queue --wait\n", done.stdout, re.M), out
    for path, pages, _seconds, rate, _x_raw, _rss, correct, total in rows:
        assert float(rate) > 0, path
        assert correct == total == str(int(pages) * len(throughput.FIELDS)), path


def test_the_async_profile_turns_off_synchronous_commit_for_dagsters_storage_only(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from bench_instances import postgres_instance
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts_tests.conftest import require_postgres

    require_postgres()
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    with postgres_instance(tmp_path, contracts, "async", async_commits=True) as env:
        assert env.label == "postgres-async"
        assert env.env["DAGSTER_PG_URL"] == env.env["SCRAPE_CONTRACTS_DB_URL"]  # shared, as docs/production.md says
        instance = env.dagster_instance()
        try:
            # the URL Dagster's event log storage connects with, as the instance built it from dagster.yaml
            with sa.create_engine(instance.event_log_storage.postgres_url).connect() as conn:
                assert conn.execute(sa.text("SHOW synchronous_commit")).scalar_one() == "off"
        finally:
            instance.dispose()
        with ProjectStore(env.db_url).engine.connect() as conn:
            assert conn.execute(sa.text("SHOW synchronous_commit")).scalar_one() == "on"
