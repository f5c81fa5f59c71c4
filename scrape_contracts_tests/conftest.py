"""Shared fixtures: a real Dagster instance (SQLite and PostgreSQL), a real HTTP site, a test harness.

PostgreSQL: the tests use the server at ``SCRAPE_CONTRACTS_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), creating a throw-away database per test. Without a
server those tests skip with the reason; with ``CI=true`` a missing server fails them instead.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from scrape_contracts_tests.fixture_site import FixtureSite
from scrape_contracts_tests.receiver import Receiver
from scrape_contracts_tests.signals import restore_stop_signals, stop_signals_disturbed

warnings.filterwarnings("ignore", category=dg.PreviewWarning)
warnings.filterwarnings("ignore", category=dg.BetaWarning)


_restored_at_start = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    """A stop signal the launcher left ignored or blocked is undone before any test (and before pytest-xdist
    starts its workers, which inherit it): else no process a test starts dies of SIGTERM (signals.py)."""
    config.stash[_restored_at_start] = restore_stop_signals()


def pytest_report_header(config: pytest.Config) -> str | None:
    restored = config.stash.get(_restored_at_start, [])
    return f"stop signals the launcher left ignored or blocked, restored: {', '.join(restored)}" if restored else None


@pytest.fixture(autouse=True)
def _stop_signals_intact() -> Iterator[None]:
    """Fail the test that leaves a stop signal ignored or blocked in this process (the worker would go on
    starting children that ignore SIGTERM, and a later test would hang), and undo it for the next test."""
    yield
    if stop_signals_disturbed():
        pytest.fail(f"this test left {', '.join(restore_stop_signals())} in the test process")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, in their order, then the rest in theirs. Under pytest-xdist (`--dist loadgroup`
    hands out one test at a time) each worker then starts on a long one, and no worker is left alone with a
    minute-long test while the others have finished."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


PG_ADMIN_URL = os.environ.get("SCRAPE_CONTRACTS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_pg_available: bool | None = None


def _postgres_available() -> bool:
    global _pg_available
    if _pg_available is None:
        try:
            engine = sa.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
            with engine.connect() as conn:
                conn.execute(sa.text("select 1"))
            engine.dispose()
            _pg_available = True
        except Exception:  # noqa: BLE001 (any failure means "no usable server")
            _pg_available = False
    return _pg_available


def require_postgres() -> None:
    if _postgres_available():
        return
    reason = f"PostgreSQL is not reachable at {PG_ADMIN_URL} (set SCRAPE_CONTRACTS_TEST_PG)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}: .ci/run must start it")
    pytest.skip(reason)


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database URL, dropped after the test."""
    require_postgres()
    name = f"sc_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        from scrape_contracts.adapters import store as store_module

        engine = store_module._engines.pop(url, None)
        if engine is not None:
            engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def site() -> Iterator[FixtureSite]:
    with FixtureSite() as fixture_site:
        yield fixture_site


# what destinations sign with in tests: `secret: ${HOOK_SECRET}`
HOOK_SECRET = "test-secret"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1, with HOOK_SECRET set for the destinations that post to it."""
    with Receiver() as found:
        monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)
        yield found


# what the shipped configs give both profiles: Dagster's own classes only (the laptop's embedded SQLite under
# the instance's folder, or PostgreSQL; the default run launcher)
STOCK_LAUNCHER = {"module": "dagster", "class": "DefaultRunLauncher"}


def sqlite_overrides(home: Path) -> dict:
    return {"run_launcher": STOCK_LAUNCHER}


def finished_run(instance: dg.DagsterInstance, run_id: str, timeout: float = 120) -> dg.DagsterRun:
    """The run once it has finished (launched through the queue: a dagster-daemon must be running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish in {timeout}s")


@dataclass
class Backend:
    name: str
    instance: dg.DagsterInstance
    db_url: str
    home: Path


@pytest.fixture(params=["sqlite", "postgres"])
def both_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A project store alone (no Dagster instance), on SQLite and on PostgreSQL."""
    from scrape_contracts.adapters import store as store_module

    url = request.getfixturevalue("pg_database") if request.param == "postgres" else \
        f"sqlite:///{tmp_path / 'store.db'}"
    yield store_module.ProjectStore(url)
    engine = store_module._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """A real Dagster instance plus the project store, on SQLite or on PostgreSQL."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(home / "artifacts"))
    if request.param == "sqlite":
        db_url = f"sqlite:///{home / 'scrape_contracts.db'}"
        monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", db_url)
        with dg.instance_for_test(temp_dir=str(home), overrides=sqlite_overrides(home)) as instance:
            yield Backend("sqlite", instance, db_url, home)
        return
    db_url = request.getfixturevalue("pg_database")
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", db_url)
    overrides = {"storage": {"postgres": {"postgres_url": db_url}}, "run_launcher": STOCK_LAUNCHER}
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        yield Backend("postgres", instance, db_url, home)


@pytest.fixture
def sqlite_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """For tests about behaviour that does not depend on the storage engine."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    db_url = f"sqlite:///{home / 'scrape_contracts.db'}"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", db_url)
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(home / "artifacts"))
    with dg.instance_for_test(temp_dir=str(home), overrides=sqlite_overrides(home)) as instance:
        yield Backend("sqlite", instance, db_url, home)


PRODUCT_CONTRACT = """
name: {name}
description: products served by the test site
targets:
{targets}
fetch:
  adapter: http
  timeout_s: 5
  retries: 0
  allow_private_addresses: true   # the test site is on 127.0.0.1
fields:
  title:
    selector: "#title"
  sku:
    selector: "#sku"
  price:
    selector: "#price"
    type: price
    rules: {{min: 0, max_change_pct: 50}}
{extra}
"""


def product_page(title: str = "Dune", sku: str = "BK-1", price: str = "$100.00", *, layout: str = "v1") -> str:
    if layout == "v1":
        body = (f'<h1 id="title" itemprop="name">{title}</h1><p>SKU: <span id="sku" itemprop="sku">{sku}</span></p>'
                f'<div class="buy"><span class="label">Price:</span> <span id="price" data-field="price">{price}</span></div>')
    elif layout == "renamed":  # ids renamed by a redesign; data-field / itemprop anchors kept
        body = (f'<div class="css-a1b2c3"><h1 class="css-x9y8z7" itemprop="name">{title}</h1></div>'
                f'<p>SKU: <span class="css-q1w2e3" itemprop="sku">{sku}</span></p>'
                f'<div class="css-buy77"><span class="css-lbl">Price:</span> '
                f'<strong class="css-p0o9i8" data-field="price">{price}</strong></div>')
    elif layout == "gone":  # the product facts are no longer on the page
        body = f'<h2 class="headline">{title}</h2><p>This product is no longer available.</p>'
    else:
        raise ValueError(layout)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<header><a href='/'>Shop</a> <span>Cart: $0.00</span></header><main itemscope>{body}</main>"
            f"<aside class='related'><h3>You may also like</h3><span class='price'>$7.99</span></aside>"
            f"<footer>(c) 2026</footer></body></html>")


class Harness:
    """Writes contracts into a folder, builds Definitions from it and runs scrape jobs on a real instance."""

    def __init__(self, backend: Backend, tmp_path: Path) -> None:
        self.backend = backend
        self.contracts_dir = tmp_path / "contracts"
        self.contracts_dir.mkdir(exist_ok=True)

    @property
    def instance(self) -> dg.DagsterInstance:
        return self.backend.instance

    @property
    def store(self) -> Any:
        from scrape_contracts.adapters.store import ProjectStore

        return ProjectStore(self.backend.db_url)

    def write(self, filename: str, text: str) -> Path:
        path = self.contracts_dir / filename
        path.write_text(textwrap.dedent(text))
        return path

    def write_hook_destination(self, receiver: Receiver) -> Path:
        """destinations.yaml with one webhook, ``hook``, that posts to ``receiver`` signed with ${HOOK_SECRET}."""
        return self.write("destinations.yaml", f"""
            destinations:
              hook: {{type: webhook, url: "{receiver.url}/hook", secret: "${{HOOK_SECRET}}",
                     allow_private_addresses: true}}
            """)

    def write_product_contract(self, name: str, urls: dict[str, str] | None = None, *, dynamic: bool = False,
                               extra: str = "") -> Path:
        if dynamic:
            targets = "  dynamic: true"
        else:
            targets = "\n".join(f"  - url: {url}\n    key: {key}" for key, url in (urls or {}).items())
        return self.write(f"{name}.yaml", PRODUCT_CONTRACT.format(name=name, targets=targets, extra=extra))

    def definitions(self, **resources: Any) -> dg.Definitions:
        from scrape_contracts.defs import build_definitions

        return build_definitions(self.contracts_dir, resources=resources or None)

    def run(self, contract: str, partition: str, defs: dg.Definitions | None = None) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs.names import scrape_job_name

        job = (defs or self.definitions()).resolve_job_def(scrape_job_name(contract))
        return job.execute_in_process(partition_key=partition, instance=self.instance, raise_on_error=False)

    def run_batch(self, contract: str, partitions: list[str] | None = None,
                  defs: dg.Definitions | None = None) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs.names import batch_job_name

        job = (defs or self.definitions()).resolve_job_def(batch_job_name(contract))
        return job.execute_in_process(run_config={"ops": {f"{contract}_scrape_batch": {"config": {
            "partitions": partitions or []}}}}, instance=self.instance, raise_on_error=False)

    def scrape_outcome(self, contract: str, partition: str, path: str) -> str:
        """Scrape one target on the ``single``-target or the ``batch`` path; the outcome of its candidate."""
        result = self.run(contract, partition) if path == "single" else self.run_batch(contract, [partition])
        assert result.success, failure_text(result)
        return self.store.latest_candidate(contract, partition, run_id=result.run_id).outcome

    def review(self, contract: str, partition: str, decision: str, reviewer: str = "alice",
               reason: str = "checked by hand", candidate_id: int | None = None) -> dg.ExecuteInProcessResult:
        defs = self.definitions()
        config: dict[str, Any] = {"contract": contract, "partition": partition, "decision": decision,
                                  "reviewer": reviewer, "reason": reason}
        if candidate_id is not None:
            config["candidate_id"] = candidate_id
        return defs.resolve_job_def("review_job").execute_in_process(
            run_config={"ops": {"review_decision": {"config": config}}}, instance=self.instance,
            raise_on_error=False)

    def accepted(self, contract: str, partition: str) -> dict[str, Any] | None:
        latest = self.store.latest_accepted(contract, partition)
        return latest.record if latest else None


@pytest.fixture
def harness(backend: Backend, tmp_path: Path) -> Harness:
    return Harness(backend, tmp_path)


@pytest.fixture
def sqlite_harness(sqlite_backend: Backend, tmp_path: Path) -> Harness:
    return Harness(sqlite_backend, tmp_path)


def failed_checks(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """check name → metadata of each failed check evaluation in a run."""
    failed = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            if not evaluation.passed:
                failed[evaluation.check_name] = {k: v.value for k, v in evaluation.metadata.items()}
    return failed


def materialized_keys(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """The error messages of a run's failed steps, as one string."""
    parts = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            parts.append(event.step_failure_data.error.message)
            if event.step_failure_data.user_failure_data is not None:
                parts.append(event.step_failure_data.user_failure_data.description or "")
    return "\n".join(parts)


DEMO_ENV_PREFIXES = ("DAGSTER_", "SCRAPE_CONTRACTS_")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a newcomer's shell: none of the project's or Dagster's settings."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(DEMO_ENV_PREFIXES)}, **extra}


@pytest.fixture(scope="session")
def demo_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``scrape-contracts demo`` as the README runs it, once per session; tests copy the instance it leaves.

    Under pytest-xdist the workers share one run: the first to take the lock runs the demo in the session's
    common temp folder, the others wait for it and copy what it left."""
    import subprocess
    import sys

    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-of-<user>/pytest-<n>/, above every worker's own folder
    root, done_marker = shared / "demo", shared / "demo.done"
    with FileLock(str(shared / "demo.lock")):
        if not done_marker.exists():
            shutil.rmtree(root, ignore_errors=True)  # a failed attempt of another worker
            root.mkdir()
            done = subprocess.run([str(Path(sys.executable).parent / "scrape-contracts"), "demo"], cwd=root,
                                  env=clean_env(), capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            done_marker.touch()
    return root / ".dagster_home"


@pytest.fixture
def demo_home(demo_snapshot: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the demo's instance (Dagster's SQLite files, the project store, the pages)."""
    home = tmp_path / "demo_home"
    shutil.copytree(demo_snapshot, home)
    for name in [k for k in os.environ if k.startswith(DEMO_ENV_PREFIXES)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def stop_daemon(daemon: Any) -> None:
    """Stop a dagster-daemon this test started, by its PID: SIGTERM, and SIGKILL (its whole process group)
    only when it has not exited long after. A loaded machine takes tens of seconds to stop one cleanly."""
    import signal
    import subprocess

    daemon.terminate()
    try:
        daemon.wait(timeout=180)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(daemon.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            daemon.kill()
        daemon.wait(timeout=30)
