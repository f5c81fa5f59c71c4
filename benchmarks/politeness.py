"""Politeness benchmark: a latency-bound site of many hosts, swept by the product and by Scrapy, each against
the least time any client with the same per-host concurrency could take.

Run from the repo root (venv active)::

    python benchmarks/politeness.py                        # 32 hosts, 2,400 pages, PostgreSQL when reachable
    python benchmarks/politeness.py --hosts 30 --pages 200 --skip-scrapy    # a quick check

What it does:

1. serves ``--hosts`` site hosts on loopback addresses (127.0.1.1, 127.0.1.2, ...; scrape_contracts_tests/
   hosts_site.py), each answering every request after its own latency, spread evenly over 50–800 ms and
   shuffled; the pages are dealt to the hosts in proportion to the square of their latency (big slow shops,
   small quick ones), so that the sweep is bound by the hosts' politeness rather than by how fast a run can
   record its targets; pages carry an ETag, and If-None-Match gets a 304; ``--busy`` of the pages (2%)
   answer 503 with Retry-After: 1 to their first request of a sweep and to any request within that second;
   the contract lists the targets one page of each host in turn (``--order``: a merged listing's order;
   dealt round-robin to two workers, each host's pages all landed in one of them);
2. prints the politeness bound: for each host, its requests (its pages and their 503s) times its latency over
   the concurrency, or, for a host with a 503, its latency twice plus the Retry-After if that is longer; the
   bound is the largest of these, the least time any client keeping to the concurrency needs;
3. sweeps the site with ``scrape-contracts --contracts-dir DIR run C`` as a user types it (first sweep, then
   an unchanged sweep: the same pages, 304s), on the production profile (``deploy/dagster.postgres.yaml`` on
   a throw-away PostgreSQL database) or, with ``--profile sqlite``, the laptop profile;
4. sweeps it with Scrapy, installed from PyPI into a virtual environment of its own at the first run (kept in
   ``--scrapy-venv``; not a dependency of the project), configured with the same per-host concurrency and its
   HTTP cache revalidating (RFC 2616 policy) for the unchanged sweep;
5. prints each sweep's time and efficiency = bound / time, the pages each got, and the most requests in flight
   at once on any host as the server saw them; for the product, where its start went until the site's first
   request, from its run's own events (until the run started, then its step, its plan, the first request).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from bench_instances import postgres_instance, postgres_reachable, sqlite_instance  # noqa: E402
from scrape_contracts_tests.hosts_site import HostPlan, HostsSite  # noqa: E402

CONTRACT = "polite_shop"
BIN = Path(sys.executable).parent
SCRAPY = "scrapy==2.19.0"


@dataclass(frozen=True)
class Site:
    plans: dict[str, HostPlan]
    paths: dict[str, list[str]]  # host → its pages
    retry_after: float
    concurrency: int

    def bound(self) -> float:
        worst = 0.0
        for host, plan in self.plans.items():
            busy = sum(1 for p in self.paths[host] if p in plan.busy)
            worst = max(worst, (len(self.paths[host]) + busy) * plan.latency_s / self.concurrency)
            if busy:
                worst = max(worst, 2 * plan.latency_s + self.retry_after)
        return worst


def page(path: str) -> str:
    n = int(path.rsplit("/", 1)[1])
    filler = "".join(f"<li>related item {i}</li>" for i in range(40))
    return (f"<!doctype html><html><head><title>Item {n}</title></head><body><main>"
            f"<h1 id='title'>Item {n}</h1><p>SKU <span id='sku'>SK-{n:05d}</span></p>"
            f"<p class='buy'>Price: <span id='price'>${10 + n % 500}.{n % 100:02d}</span></p>"
            f"<ul>{filler}</ul></main></body></html>")


def make_site(hosts: int, pages: int, concurrency: int, busy: float, retry_after: float, seed: int) -> Site:
    rng = random.Random(seed)
    latencies = [0.05 + 0.75 * i / max(1, hosts - 1) for i in range(hosts)]
    rng.shuffle(latencies)
    weights = [lat ** 2 for lat in latencies]
    counts = [max(5, round(pages * w / sum(weights))) for w in weights]
    plans, paths, n = {}, {}, 0
    for i, (latency, count) in enumerate(zip(latencies, counts)):
        host = f"127.0.1.{i + 1}"
        paths[host] = [f"/item/{n + j}" for j in range(count)]
        n += count
        chosen = {p: retry_after for p in paths[host] if rng.random() < busy}
        plans[host] = HostPlan(latency_s=round(latency, 3), page=page, busy=chosen)
    return Site(plans, paths, retry_after, concurrency)


def ordered(site: Site, server: HostsSite, order: str) -> list[str]:
    """The targets' URLs in the contract's order: ``interleaved`` (one page of each host in turn, as a merged
    listing gives), ``grouped`` (host by host, as sorted URLs give) or ``shuffled``."""
    by_host = [[server.url(host, p) for p in ps] for host, ps in site.paths.items()]
    if order == "grouped":
        return [url for urls in by_host for url in urls]
    if order == "interleaved":
        return [urls[i] for i in range(max(map(len, by_host))) for urls in by_host if i < len(urls)]
    urls = [url for urls in by_host for url in urls]
    random.Random(1).shuffle(urls)
    return urls


def write_contract(site: Site, urls: list[str], folder: Path) -> int:
    targets = [f"  - url: {url}\n    key: i{url.rsplit('/', 1)[1]}" for url in urls]
    (folder / f"{CONTRACT}.yaml").write_text(textwrap.dedent(f"""\
        name: {CONTRACT}
        batch_size: {max(2000, len(targets))}
        targets:
        """) + "\n".join(targets) + textwrap.dedent(f"""
        fetch:
          adapter: http
          concurrency: {site.concurrency}
          retries: 2
          timeout_s: 10
          allow_private_addresses: true   # the site is on loopback addresses
        fields:
          title: {{selector: "#title"}}
          sku: {{selector: "#sku"}}
          price: {{selector: "#price", type: price}}
        """))
    return len(targets)


LAST_SPAN: list[float] = [0.0, 0.0]  # the last timed command's start and end, on the server's clock
WALL_START: list[float] = [0.0]  # the same start on the wall clock, which Dagster's event timestamps use


def timed(command: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> float:
    WALL_START[0], started = time.time(), time.monotonic()
    LAST_SPAN[:] = [started, started]
    with log.open("a") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    took = time.monotonic() - started
    LAST_SPAN[1] = started + took
    if done.returncode != 0:  # 1: some target failed, said in the summary
        tail = "\n".join(log.read_text().splitlines()[-int(os.environ.get("POLITE_LOG_LINES", "6")):])
        print(f"  {Path(command[0]).name} exited {done.returncode}:\n{textwrap.indent(tail, '  | ')}", flush=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command[0]} exited {done.returncode}")
    return took


def scrapy_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", SCRAPY], check=True)
    return python


SPIDER = '''
import json, scrapy

class Shop(scrapy.Spider):
    name = "shop"

    async def start(self):
        for url in json.load(open(self.urls)):
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("#title::text").get(),
               "sku": response.css("#sku::text").get(), "price": response.css("#price::text").get()}
'''


def scrapy_sweep(python: Path, work: Path, urls: list[str], site: Site, sweep: int, log: Path,
                 delay: float) -> tuple[float, int]:
    spider, url_file, items = work / "spider.py", work / "urls.json", work / f"items-{sweep}.jsonl"
    spider.write_text(SPIDER)
    url_file.write_text(json.dumps(urls))
    hosts = len(site.plans)
    settings = {
        "CONCURRENT_REQUESTS": hosts * site.concurrency, "CONCURRENT_REQUESTS_PER_DOMAIN": site.concurrency,
        "DOWNLOAD_DELAY": delay, "RANDOMIZE_DOWNLOAD_DELAY": False, "ROBOTSTXT_OBEY": True, "LOG_LEVEL": "WARNING", "RETRY_TIMES": 2,
        "TELNETCONSOLE_ENABLED": False, "HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(work / "cache"),
        "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy", "REACTOR_THREADPOOL_MAXSIZE": 20,
    }
    command = [str(python), "-m", "scrapy", "runspider", str(spider), "-O", f"{items}:jsonlines"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    command += ["-a", f"urls={url_file}"]
    took = timed(command, {**os.environ, "PYTHONPATH": ""}, log)
    got = sum(1 for line in items.read_text().splitlines() if '"price": "$' in line) if items.exists() else 0
    return took, got


def accepted_count(env: dict[str, str]) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(env["SCRAPE_CONTRACTS_DB_URL"])
    with engine.connect() as conn:
        count = conn.execute(sa.text("select count(distinct partition) from sc_accepted where contract = :c"),
                             {"c": CONTRACT}).scalar()
    engine.dispose()
    return int(count or 0)


def start_phases(instance: object, first_request: float) -> dict[str, float]:
    """Where the product's start went, from its newest run's own events (Dagster's wall-clock timestamps) and
    the site's first request: the command until the run started (Python, imports, the instance, the
    definitions, the run's record), the run's start until the batch step's, the step until it logged its plan,
    and the plan until the site saw the first request (the fetching process's start, robots.txt's request)."""
    import dagster as dg

    run = instance.get_runs(limit=1)[0]  # type: ignore[attr-defined]
    events = instance.all_logs(run.run_id)  # type: ignore[attr-defined]

    def first(test: Any) -> float:
        return next(e.timestamp for e in events if test(e)) - WALL_START[0]

    run_start = first(lambda e: e.dagster_event_type == dg.DagsterEventType.RUN_START)
    step_start = first(lambda e: e.dagster_event_type == dg.DagsterEventType.STEP_START)
    planned = first(lambda e: (e.user_message or "").startswith("scraping "))
    request = first_request - LAST_SPAN[0]
    return {"to_run_start_s": round(run_start, 2), "run_start_to_step_s": round(step_start - run_start, 2),
            "step_to_plan_s": round(planned - step_start, 2), "plan_to_first_request_s": round(request - planned, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--pages", type=int, default=2400)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--busy", type=float, default=0.02, help="share of pages answering 503 + Retry-After")
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--order", choices=["interleaved", "grouped", "shuffled"], default="interleaved",
                        help="the targets' order in the contract (default: one page of each host in turn)")
    parser.add_argument("--profile", choices=["postgres", "sqlite"], default=None,
                        help="the product's instance profile (default: postgres when reachable)")
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument("--skip-product", action="store_true", help="Scrapy only (to check its setup)")
    parser.add_argument("--scrapy-delays", default="0,0.001",
                        help="Scrapy's DOWNLOAD_DELAY, one pair of sweeps each (0 let it pass its per-host cap here)")
    parser.add_argument("--scrapy-venv", type=Path, default=Path(tempfile.gettempdir()) / "scrape-contracts-scrapy-venv")
    parser.add_argument("--product", type=Path, default=REPO,
                        help="the checkout whose scrape_contracts the product sweeps run (to compare builds)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.hosts < 1 or args.hosts > 250:
        parser.error("--hosts: 1 to 250 (addresses 127.0.1.1 to 127.0.1.250)")

    site = make_site(args.hosts, args.pages, args.concurrency, args.busy, args.retry_after, args.seed)
    profile = args.profile or ("postgres" if postgres_reachable() else "sqlite")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="politeness-") as tmp, HostsSite(site.plans) as server:
        work = Path(tmp)
        contracts = work / "contracts"
        contracts.mkdir()
        urls = ordered(site, server, args.order)
        total = write_contract(site, urls, contracts)
        bound = site.bound()
        busy = sum(len(p.busy) for p in site.plans.values())
        print(f"site: {len(site.plans)} hosts, {total} pages ({args.order}), latency 50-800 ms, concurrency "
              f"{site.concurrency} per host, {busy} pages answering 503 + Retry-After {args.retry_after:g}s first")
        print(f"politeness bound: {bound:.2f}s ({total / bound:.1f} pages/s at most)")
        log = work / "commands.log"

        def record(label: str, took: float, got: int, instance: object = None) -> None:
            peak = max(server.peak(h) for h in site.plans)
            seen = [s for s in server.seen if s.path != "/robots.txt"]
            # when the site saw its last page asked: the rest of the command is recording and its own start/end
            fetching = max(s.end for s in seen) - min(s.start for s in seen) if seen else 0.0
            # the command's fixed costs: from its start to the site's first request (robots.txt included), and
            # from the site's last answer to the command's end
            every = server.seen
            lead = min(s.start for s in every) - LAST_SPAN[0] if every else 0.0
            tail = LAST_SPAN[1] - max(s.end for s in every) if every else 0.0
            phases = start_phases(instance, min(s.start for s in every)) if instance is not None and every else {}
            rows.append({"path": label, "seconds": round(took, 2), "efficiency": round(bound / took, 3),
                         "pages": got, "max_in_flight_per_host": peak, "fetching_s": round(fetching, 2),
                         "start_to_first_request_s": round(lead, 2), "last_answer_to_end_s": round(tail, 2),
                         **phases})
            print(f"{label:<40} {took:7.2f}s  efficiency {bound / took:5.3f}  pages {got}/{total}  max in flight "
                  f"per host {peak}  (first to last request {fetching:.2f}s; start to first request {lead:.2f}s, "
                  f"last answer to end {tail:.2f}s)", flush=True)
            if phases:
                print(f"{'':<40} start: {phases['to_run_start_s']:.2f}s to the run's start, then "
                      f"{phases['run_start_to_step_s']:.2f}s to its step's, {phases['step_to_plan_s']:.2f}s to its "
                      f"plan, {phases['plan_to_first_request_s']:.2f}s to the first request", flush=True)
            server.reset()

        if not args.skip_product:
            with contextlib.ExitStack() as stack:
                instance = stack.enter_context(postgres_instance(work, contracts)) if profile == "postgres" \
                    else sqlite_instance(work, contracts)
                command = [str(BIN / "scrape-contracts"), "--contracts-dir", str(contracts), "run", CONTRACT]
                env = {**instance.env, "SCRAPE_CONTRACTS_DB_URL": instance.db_url,
                       "PYTHONPATH": str(args.product.resolve())}
                server.reset()
                # from the checkout's folder: the parse workers' forkserver finds the package there too
                for label in ("first", "unchanged"):
                    took = timed(command, env, log, cwd=args.product.resolve())
                    dagster_instance = instance.dagster_instance()
                    record(f"scrape-contracts, {label} ({profile})", took, accepted_count(env), dagster_instance)
                    dagster_instance.dispose()
        if not args.skip_scrapy:
            python = scrapy_python(args.scrapy_venv)
            for delay in (float(d) for d in args.scrapy_delays.split(",")):
                shutil.rmtree(work / "cache", ignore_errors=True)  # each pair starts with no HTTP cache
                for sweep, label in ((1, "first"), (2, "unchanged")):
                    took, got = scrapy_sweep(python, work, urls, site, sweep, log, delay)
                    record(f"scrapy DOWNLOAD_DELAY={delay:g}, {label}", took, got)
        if args.json:
            args.json.write_text(json.dumps({"bound_s": bound, "pages": total, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
