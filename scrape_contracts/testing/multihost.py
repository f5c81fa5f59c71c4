"""A scrape deployment over network-namespace hosts (``netns.py``), as a team would run one on machines:

- every host has the same instance config, ``deploy/dagster.postgres.yaml`` in its own DAGSTER_HOME, with
  ``DAGSTER_PG_URL`` set to the database as that host reaches it (worker hosts: over the bridge);
- every host stores pages in the project store (``SCRAPE_CONTRACTS_PAGES=store``): no folder is shared;
- each worker host runs one Celery worker (``dagster-celery worker start``), on a RabbitMQ virtual host of
  the deployment's own, so that two deployments on one broker (tests in parallel) never take each other's
  tasks;
- the control host runs ``dagster-daemon`` (the runs are queued: its run launcher starts the run workers,
  whose Celery executor sends the chunk steps to the broker) and the sweeps (``scrape-contracts run C
  --queue --wait``).

Used by the multi-host tests and ``benchmarks/multihost.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scrape_contracts.testing import netns
from scrape_contracts.testing.hosts_site import HostsSite

REPO = Path(__file__).resolve().parents[2]
INSTANCE_CONFIG = REPO / "deploy" / "dagster.postgres.yaml"
WORKER_CONFIG = REPO / "deploy" / "celery_worker.yaml"  # the shipped worker settings; the broker set per host
_BIN = Path(sys.executable).parent
_CLI = "from scrape_contracts.cli import console; console()"  # `scrape-contracts` of this interpreter


def _rabbitmqctl(*args: str, check: bool = True) -> str:
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    done = subprocess.run([ctl, *args], capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _clean_stale_vhosts() -> None:
    for line in _rabbitmqctl("list_vhosts", "--quiet", "--no-table-headers", check=False).splitlines():
        name = line.strip()
        if name.startswith(netns.FAMILY) and not netns.owner_alive(name):
            _rabbitmqctl("delete_vhost", name, check=False)


@dataclass
class Deployment:
    cluster: netns.Cluster
    db_url: str  # as the control host (and this process) reach it
    contracts_dir: Path
    vhost: str
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    daemon: subprocess.Popen | None = None

    def environment(self, host: str, **extra: str) -> dict[str, str]:
        db = self.cluster.database_url(self.db_url, host)
        broker = self.cluster.broker_url(host).rstrip("/") + f"/{self.vhost}"
        return self.cluster.environment(
            host, PATH=f"{_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            PYTHONPATH=str(REPO), DAGSTER_PG_URL=db, SCRAPE_CONTRACTS_DB_URL=db,
            SCRAPE_CONTRACTS_PAGES="store",
            PGAPPNAME=f"host-{host}",  # the database's sessions say which host they are (pg_stat_activity)
            SCRAPE_CONTRACTS_DIR=str(self.contracts_dir), SCRAPE_CONTRACTS_EXECUTOR="celery",
            SCRAPE_CONTRACTS_CELERY_BROKER=broker, **{**self.extra_env, **extra})

    def log(self, host: str, what: str) -> Path:
        return self.cluster.hosts[host].home / f"{what}.log"

    def start_worker(self, host: str, concurrency: int = 1, heartbeat: int | None = None) -> subprocess.Popen:
        """One Celery worker on ``host`` (``concurrency`` chunk steps at a time), listening on the
        deployment's virtual host, with the shipped worker settings (``heartbeat``: another
        ``broker_heartbeat``, in seconds: how soon the broker gives a frozen worker's chunk away)."""
        config = self.cluster.hosts[host].home / "celery.yaml"
        env = self.environment(host)
        shipped = yaml.safe_load(WORKER_CONFIG.read_text()) if WORKER_CONFIG.is_file() else {}
        settings = shipped.setdefault("execution", {}).setdefault("config", {})
        settings["broker"] = env["SCRAPE_CONTRACTS_CELERY_BROKER"]
        if heartbeat is not None:
            settings.setdefault("config_source", {})["broker_heartbeat"] = heartbeat
        config.write_text(yaml.safe_dump(shipped))
        process = self.cluster.start(host, [
            str(_BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
            "-y", f"{netns.HOST_DIR}/celery.yaml",
            "--name", f"host-{host}", "--", "--pool", "threads", "--concurrency", str(concurrency),
            "--without-gossip",
            "--without-mingle"], env, log=self.log(host, "worker"), cwd=REPO)
        self.workers[host] = process
        return process

    def worker_ready(self, host: str) -> bool:
        return "ready." in self.log(host, "worker").read_text(errors="replace")

    def stop_worker(self, host: str, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        """Stop ``host``'s worker by its process group (the CLI and the Celery processes it started)."""
        process = self.workers.pop(host)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        netns.wait_until(f"host {host}'s worker processes gone", lambda: not self.cluster.pids(host), timeout)

    def start_daemon(self) -> subprocess.Popen:
        self.daemon = self.cluster.start(
            netns.CONTROL, [str(_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            self.environment(netns.CONTROL), log=self.log(netns.CONTROL, "daemon"), cwd=REPO)
        return self.daemon

    def command(self, host: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``scrape-contracts ARGS`` on ``host``."""
        return self.cluster.run(host, [sys.executable, "-c", _CLI, *args],
                                self.environment(host), timeout=timeout)

    def _sweep_args(self, contract: str, key: str, timeout: float) -> list[str]:
        return ["run", contract, "--queue", "--wait", "--idempotency-key", key,
                "--timeout", str(int(timeout)), "--workspace", str(REPO / "workspace.yaml")]

    def sweep(self, contract: str, key: str, *, timeout: float = 600) -> subprocess.CompletedProcess:
        """Every target of ``contract`` not paused, as queued batched runs started by the daemon; waits."""
        return self.command(netns.CONTROL, *self._sweep_args(contract, key, timeout), timeout=timeout + 60)

    def start_sweep(self, contract: str, key: str, *, timeout: float = 600) -> subprocess.Popen:
        """``sweep`` in the background (its output in the control host's ``sweep-KEY.log``)."""
        return self.cluster.start(netns.CONTROL, [
            sys.executable, "-c", _CLI,
            *self._sweep_args(contract, key, timeout)], self.environment(netns.CONTROL),
            log=self.log(netns.CONTROL, f"sweep-{key}"), cwd=REPO)

    def prepare(self) -> None:
        """The instance's and the project store's tables, made once before any host starts."""
        done = self.cluster.run(netns.CONTROL, [sys.executable, "-c", (
            "import dagster as dg; dg.DagsterInstance.get().get_runs(limit=1); "
            "from scrape_contracts import settings; "
            "from scrape_contracts.adapters.store import ProjectStore; "
            "ProjectStore(settings.db_url())")], self.environment(netns.CONTROL), timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"could not prepare the instance and the store: {done.stderr[-2000:]}")


@contextlib.contextmanager
def deployment(cluster: netns.Cluster, db_url: str, contracts_dir: Path,
               **extra_env: str) -> Iterator[Deployment]:
    """The deployment on ``cluster``'s hosts (``db_url``: an empty PostgreSQL database on 127.0.0.1);
    its processes stopped and its virtual host removed on exit."""
    _clean_stale_vhosts()
    vhost = cluster.prefix
    _rabbitmqctl("add_vhost", vhost)
    made = Deployment(cluster, db_url, contracts_dir, vhost, dict(extra_env))
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        for host in cluster.hosts.values():
            shutil.copy(INSTANCE_CONFIG, host.home / "dagster_home" / "dagster.yaml")
        made.prepare()
        yield made
    finally:
        for host in list(made.workers):
            with contextlib.suppress(Exception):
                made.stop_worker(host, signal.SIGKILL, timeout=20)
        if made.daemon is not None and made.daemon.poll() is None:
            os.killpg(made.daemon.pid, signal.SIGTERM)
            try:
                made.daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(made.daemon.pid, signal.SIGKILL)
        _rabbitmqctl("delete_vhost", vhost, check=False)


CONTRACT = """\
name: {name}
description: the multi-host sweeps' shop, served from the site namespace
targets:
{targets}
fetch:
  adapter: http
  timeout_s: 20
  retries: 1
  concurrency: {concurrency}
  allow_private_addresses: true   # the site is on the hosts' own subnet (10.213.X.0/24)
fields:
  title:
    selector: "#title"
  sku:
    selector: "#sku"
  price:
    selector: "#price"
    type: price
    rules: {{min: 0, max_change_pct: 50}}
"""


def write_contract(folder: Path, name: str, targets: dict[str, str], concurrency: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(f"  - url: {url}\n    key: {key}" for key, url in targets.items())
    path = folder / f"{name}.yaml"
    path.write_text(CONTRACT.format(name=name, targets=lines, concurrency=concurrency))
    return path


class Shop:
    """Product pages ``/p/<n>`` on every site host. ``layout[path]`` (``v1``, or ``renamed``: the ids gone in
    a redesign, the ``itemprop``/``data-field`` anchors kept, so the healer finds the fields again;
    ``noprice``: sold out, no price) and ``price[path]`` change what a page says from one sweep to the
    next."""

    def __init__(self) -> None:
        self.layout: dict[str, str] = {}
        self.price: dict[str, str] = {}

    def page(self, path: str) -> str:
        n = path.rsplit("/", 1)[-1]
        title, sku, price = f"Book {n}", f"BK-{n}", self.price.get(path, f"${10 + int(n) % 90}.00")
        layout = self.layout.get(path, "v1")
        if layout == "v1":
            body = (f'<h1 id="title" itemprop="name">{title}</h1><p>SKU: <span id="sku" itemprop="sku">{sku}'
                    f'</span></p><div class="buy">Price: <span id="price" data-field="price">{price}</span>'
                    '</div>')
        elif layout == "noprice":  # sold out: no price on the page
            body = (f'<h1 id="title" itemprop="name">{title}</h1><p>SKU: <span id="sku" itemprop="sku">{sku}'
                    '</span></p>')
        else:
            body = (f'<div class="c-a1"><h1 class="c-t9" itemprop="name">{title}</h1></div><p>SKU: <span '
                    f'class="c-s3" itemprop="sku">{sku}</span></p><div class="c-b7">Price: <strong '
                    f'class="c-p0" data-field="price">{price}</strong></div>')
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                f"<header><a href='/'>Shop</a></header><main itemscope>{body}</main>"
                f"<aside><span class='price'>$7.99</span></aside></body></html>")


def dealt_targets(site: HostsSite, addresses: list[str], count: int) -> dict[str, str]:
    """``count`` targets, key ``p<n>``, dealt over the site hosts in turn."""
    return {f"p{n}": site.url(addresses[n % len(addresses)], f"/p/{n}") for n in range(count)}
