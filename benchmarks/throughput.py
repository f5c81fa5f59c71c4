"""Throughput benchmark: batched scraping against a hand-written httpx+lxml loop, measured in the same run.

Run from the repo root (venv active)::

    python benchmarks/throughput.py --pages 2000            # PostgreSQL too when 127.0.0.1:5432 answers
    python benchmarks/throughput.py --pages 40 --sample 5 --skip-postgres   # a quick check

What it does:

1. generates a seeded shop of N product pages, 30–60 KB each, with decoy prices/SKUs/ratings around the
   real ones and seven price formats (``benchmarks/sitegen.py``); the truth stays in memory;
2. serves it on 127.0.0.1 with nginx when installed (else a threaded Python server), both with
   ETag/If-None-Match and Last-Modified/If-Modified-Since → 304;
3. writes a contract for it (7 fields: title, sku, price, in_stock, rating, review_count, brand) into a
   temporary contracts folder;
4. measures, each figure from this run, on the instance profiles as shipped (``dagster.yaml``: Dagster's SQLite
   storage; ``deploy/dagster.postgres.yaml`` on a throw-away PostgreSQL database), each on a fresh instance:

   (a) raw      a plain sync ``httpx.Client`` + lxml loop in one process, same fields, same JSON Schema
                (jsonschema) and rules, no project code and no Dagster: what a team writes by hand;
   (d) single   ``scrape_<name>_job`` executed in process, one partition at a time, on a sample of targets
                (what the UI's "Materialize" of one partition does), laptop profile;
   (b) batch    ``scrape-contracts run NAME --idempotency-key K`` as a user types it: the batched runs executed
                in the command's process, one after the other;
   (c) batch    the same command with a new key after a few pages changed (most pages answer 304 or
                the same bytes);
   (q) queue    (b) and (c) with ``--queue --wait``: the runs go to the instance's queue and the
                ``dagster-daemon`` started here (stopped by its PID) launches them, one process per run;

   and checks every extracted value of every path against the generated truth (accepted data for the
   project's paths), printing correct/total values.

Figures: seconds is wall-clock (for (b)/(c)/(q) the whole user command: Python's start, the runs, the summary;
the time inside the runs is printed too); pages/s = pages / seconds; x_raw = pages/s ÷ raw pages/s; peak_MB is
the peak memory of the processes doing the work (raw: the loop's process, its peak RSS; single: the process
executing the jobs; batch: the command's process with its parse workers and their forkserver; queue: the run
workers with their children, not the daemon's code server nor the ``dagster job launch`` processes; sampled from
/proc as PSS: pages a fork shares with its parent are counted once, not once per process). The load average
is printed before and after each path: the machine's other work moves every rate, the ratios less.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import sitegen  # noqa: E402
from bench_instances import PG_ADMIN_URL, InstanceEnv, postgres_instance, postgres_reachable, sqlite_instance  # noqa: E402
from bench_procs import BIN, Daemon, PssSampler, load_average  # noqa: E402

CONTRACT_NAME = "bench_shop"

# The contract's fields; the raw baseline reads the same selectors and rules from here (not from project code).
FIELDS: dict[str, dict[str, Any]] = {
    "title": {"selector": ".product-main h1.product-title"},
    "sku": {"selector": ".product-main [itemprop=sku]"},
    "price": {"selector": ".product-main .price-box .price__now", "type": "price",
              "rules": {"min": 0, "max_change_pct": 50}},
    "in_stock": {"selector": ".product-main .availability .stock", "type": "boolean"},
    "rating": {"selector": ".product-main [itemprop=ratingValue]", "type": "number", "rules": {"min": 0, "max": 5}},
    "review_count": {"selector": ".product-main [itemprop=reviewCount]", "type": "integer", "rules": {"min": 0}},
    "brand": {"selector": ".product-main [itemprop=brand]"},
}
JSON_TYPES = {"string": "string", "price": "number", "number": "number", "integer": "integer", "boolean": "boolean"}


def record_schema() -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {n: {"type": JSON_TYPES[f.get("type", "string")]} for n, f in FIELDS.items()},
            "required": list(FIELDS)}


# ------------------------------------------------------------------------------------------- results


@dataclass
class Row:
    path: str
    pages: int
    seconds: float
    peak_rss_mb: float | None
    correct: int
    total: int
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0


def check_values(records: dict[str, dict[str, Any] | None], truth: dict[str, dict[str, Any]],
                 keys: list[str]) -> tuple[int, int, list[str]]:
    """(correct values, total values, examples of wrong ones): every field of every key in ``keys``."""
    correct, total, wrong = 0, 0, []
    for key in keys:
        record = records.get(key) or {}
        for name in FIELDS:
            total += 1
            got, want = record.get(name), truth[key][name]
            if _same(got, want):
                correct += 1
            elif len(wrong) < 5:
                wrong.append(f"{key}.{name}: got {got!r}, truth {want!r}" + ("" if record else " (no record)"))
    return correct, total, wrong


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)
    return got == want


# -------------------------------------------------------------------------------- (a) raw baseline


_NUMBER = re.compile(r"\d[\d.,'\u00a0\u202f ]*")
_BOOLEANS = {"in stock": True, "available": True, "yes": True, "true": True,
             "out of stock": False, "sold out": False, "unavailable": False, "no": False, "false": False}


def parse_price(text: str) -> float:
    """'$1,299.00', '1.299,00 €', 'CHF 1'299.00', '1 299,00 €', 'USD 45' → float. A decimal separator is the
    last '.' or ',' followed by one or two digits; every other separator groups thousands."""
    match = _NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in {text!r}")
    digits = re.sub(r"['\u00a0\u202f ]", "", match.group()).rstrip(".,")
    last = max(digits.rfind("."), digits.rfind(","))
    if last != -1 and len(digits) - last - 1 in (1, 2):
        return float(re.sub(r"[.,]", "", digits[:last]) + "." + digits[last + 1:])
    return float(re.sub(r"[.,]", "", digits))


def _parse(text: str, kind: str) -> Any:
    if kind == "string":
        return text
    if kind == "price":
        return parse_price(text)
    if kind == "number":
        return float(text.replace(",", "."))
    if kind == "integer":
        return int(re.sub(r"[,.'\u00a0 ]", "", text))
    if kind == "boolean":
        return _BOOLEANS[text.lower()]
    raise ValueError(kind)


def raw_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The hand-written loop: GET → lxml → one element per field → type → JSON Schema + rules."""
    import httpx
    import lxml.html
    from jsonschema import Draft202012Validator
    from lxml.cssselect import CSSSelector

    selectors = {name: CSSSelector(f["selector"]) for name, f in FIELDS.items()}
    validator = Draft202012Validator(record_schema())
    records: dict[str, dict[str, Any] | None] = {}
    problems: dict[str, list[str]] = {}
    started = time.perf_counter()
    with httpx.Client(timeout=10.0) as client:
        for key, url, expected_sku in spec["targets"]:
            response = client.get(url)
            response.raise_for_status()
            root = lxml.html.fromstring(response.content)
            record: dict[str, Any] = {}
            errors: list[str] = []
            for name, field_spec in FIELDS.items():
                texts = {" ".join(el.text_content().split()) for el in selectors[name](root)} - {""}
                if len(texts) != 1:
                    errors.append(f"{name}: {len(texts)} distinct matches")
                    record[name] = None
                    continue
                try:
                    record[name] = _parse(texts.pop(), field_spec.get("type", "string"))
                except (ValueError, KeyError) as exc:
                    errors.append(f"{name}: {exc}")
                    record[name] = None
            errors += [error.message for error in validator.iter_errors(record)]
            errors += _rule_violations(record, expected_sku)
            records[key] = None if errors else record
            if errors:
                problems[key] = errors
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "records": records, "problems": problems, "peak_rss_kb": _own_peak_rss_kb()}


def _rule_violations(record: dict[str, Any], expected_sku: str) -> list[str]:
    out = []
    for name, field_spec in FIELDS.items():
        rules, value = field_spec.get("rules", {}), record.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "min" in rules and value < rules["min"]:
                out.append(f"{name} {value} < {rules['min']}")
            if "max" in rules and value > rules["max"]:
                out.append(f"{name} {value} > {rules['max']}")
    if record.get("sku") != expected_sku:
        out.append(f"sku {record.get('sku')!r} is not the expected {expected_sku!r}")
    return out


def _own_peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


# ------------------------------------------------------------------------ (d) one run per partition


def partitions_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """``scrape_<name>_job`` in process, one partition at a time, like the conftest Harness.run."""
    import warnings

    import dagster as dg

    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.names import scrape_job_name

    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    defs = build_definitions(spec["contracts_dir"])
    job = defs.resolve_job_def(scrape_job_name(spec["contract"]))
    instance = dg.DagsterInstance.get()
    failed = []
    started = time.perf_counter()
    for key in spec["keys"]:
        result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False)
        if not result.success:
            failed.append(key)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "failed": failed, "peak_rss_kb": _own_peak_rss_kb()}


def run_worker(kind: str, spec: dict[str, Any], env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """Run a worker in its own process (its memory is its own) and return what it reports."""
    spec_path = workdir / f"{kind}-spec.json"
    out_path = workdir / f"{kind}-result.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), f"_{kind}", str(spec_path), str(out_path)],
                          env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(out_path.read_text())


# -------------------------------------------------------------------------------- (b)/(c) batched


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DAGSTER_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - dagster")


class Mode:
    """How the command starts its runs: in its own process (the default) or through the instance's queue."""

    IN_PROCESS = "in-process"
    QUEUE = "queue"


PROFILE_DIR: Path | None = None  # --profile
PARALLEL: int | None = None  # --parallel: the in-process command's own option (default: the project's)


def batched_sweep(label: str, instance_env: InstanceEnv, contracts_dir: Path, key: str,
                  truth: dict[str, dict[str, Any]], timeout: float, daemon: Daemon | None = None) -> Row:
    """One user command, ``scrape-contracts run NAME --idempotency-key KEY`` (with ``--queue --wait`` when a
    daemon is given), then the accepted data checked against the truth."""
    flags = ["--queue", "--wait"] if daemon is not None else []
    if daemon is None and PARALLEL is not None:
        flags += ["--parallel", str(PARALLEL)]
    command = [str(BIN / "scrape-contracts"), "--contracts-dir", str(contracts_dir), "run", CONTRACT_NAME,
               "--idempotency-key", key, *flags]
    if PROFILE_DIR is not None:  # --profile: each sweep's processes sampled by py-spy, as collapsed stacks
        slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
        command = ["py-spy", "record", "--subprocesses", "--format", "raw", "--rate", "50",
                   "-o", str(PROFILE_DIR / f"{slug}.txt"), "--", *command]
    load_before = load_average()
    started = time.perf_counter()
    process = subprocess.Popen(command, env=instance_env.env, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    # the in-process command does the work itself; with --queue the daemon's run workers do
    sampler = PssSampler(daemon.pid, with_root=False) if daemon is not None else PssSampler(process.pid, with_root=True)
    sampler.start()
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): the command goes too
        process.kill()
        process.wait()
        raise
    finally:
        peak_kb = sampler.stop()
    seconds = time.perf_counter() - started
    output = [_ANSI.sub("", line) for line in out.strip().splitlines()]
    # the summary line first (per-outcome counts), then the first few of whatever else it printed
    summary = [line for line in output if line.startswith(f"{CONTRACT_NAME}: ")]
    run_lines = [line for line in output if re.match(rf"^{CONTRACT_NAME} batch \d+/\d+ ", line)]
    other = [line for line in output
             if line not in run_lines and not _DAGSTER_LOG.match(line) and line not in summary]
    shown = summary + other[:6] + ([f"... {len(other) - 6} more line(s)"] if len(other) > 6 else [])
    if process.returncode != 0:
        shown.append(f"(exit code {process.returncode}"
                     + (f"; daemon log: {daemon.log_tail(800)})" if daemon is not None else ")"))
    records = accepted_records(instance_env)
    correct, total, wrong = check_values(records, truth, sorted(truth))
    span = runs_span(instance_env, key)
    notes = [f"$ scrape-contracts --contracts-dir DIR run {CONTRACT_NAME} --idempotency-key {key} {' '.join(flags)}",
             f"  load average before {load_before}, after {load_average()}",
             f"  {len(run_lines)} run(s); " + (span.describe() if span else "no run times recorded")
             + f"; largest process {sampler.largest_kb / 1024:.0f} MB",
             f"  {sampler.cpu_line()}",
             *(f"  | {line}" for line in shown), *(f"  wrong: {w}" for w in wrong)]
    return Row(label, len(truth), seconds, peak_kb / 1024 if peak_kb else None, correct, total, notes)


@dataclass(frozen=True)
class RunsSpan:
    """Where a command's time went, from its runs' records: creation, start and end of each run."""

    runs: int
    first_created_to_start: float  # queue and launch (in process: the run's own setup)
    span: float  # first start → last end
    busy: float  # the runs' durations added up (more than span when runs overlap)

    def describe(self) -> str:
        return (f"{self.span:.1f}s inside the runs (first start → last end; {self.busy:.1f}s of run time added up), "
                f"{self.first_created_to_start:.1f}s from the first run's creation to its start")


def accepted_records(instance_env: InstanceEnv) -> dict[str, dict[str, Any]]:
    from scrape_contracts.adapters.store import ProjectStore

    return {v.partition: dict(v.record) for v in ProjectStore(instance_env.db_url).latest_accepted_all(CONTRACT_NAME)}


def runs_span(instance_env: InstanceEnv, key: str) -> RunsSpan | None:
    import dagster as dg

    instance = instance_env.dagster_instance()
    try:
        records = instance.get_run_records(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": key}))
    finally:
        instance.dispose()
    timed = [r for r in records if r.start_time and r.end_time]
    if not timed:
        return None
    first = min(timed, key=lambda r: r.create_timestamp)
    return RunsSpan(len(timed), first.start_time - first.create_timestamp.timestamp(),
                    max(r.end_time for r in timed) - min(r.start_time for r in timed),
                    sum(r.end_time - r.start_time for r in timed))


# ----------------------------------------------------------------------------------- the contract


def batch_knobs(concurrency: int | None, batch_size: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fetch settings, contract settings) for the batch path, used only if the contract model has them."""
    from scrape_contracts.contract.fetch import FetchSettings
    from scrape_contracts.contract.model import Contract

    fetch = {"concurrency": concurrency} if concurrency and "concurrency" in FetchSettings.model_fields else {}
    top = {"batch_size": batch_size} if batch_size and "batch_size" in Contract.model_fields else {}
    return fetch, top


def describe_knobs(fetch_knobs: dict[str, Any], top_knobs: dict[str, Any]) -> str:
    from scrape_contracts.contract.fetch import FetchSettings
    from scrape_contracts.contract.model import Contract

    parts = []
    for name, given, model in (("fetch.concurrency", fetch_knobs.get("concurrency"), FetchSettings),
                               ("batch_size", top_knobs.get("batch_size"), Contract)):
        key = name.split(".")[-1]
        if given is not None:
            parts.append(f"{name}: {given}")
        elif key in model.model_fields:
            parts.append(f"{name}: project default ({model.model_fields[key].default})")
        else:
            parts.append(f"{name}: not in the contract model yet")
    return ", ".join(parts)


def write_contract(contracts_dir: Path, site: sitegen.Site, base_url: str, fetch_knobs: dict[str, Any],
                   top_knobs: dict[str, Any]) -> Path:
    lines = [f"name: {CONTRACT_NAME}", "description: generated product pages served on 127.0.0.1 (benchmark)",
             "targets:"]
    for key, product in site.products.items():
        lines += [f"  - url: {json.dumps(base_url + product.path)}", f"    key: {key}",
                  f"    expected: {{sku: {json.dumps(product.facts['sku'])}}}"]
    lines += ["fetch:", "  adapter: http", "  timeout_s: 10", "  allow_private_addresses: true   # 127.0.0.1"]
    lines += [f"  {k}: {v}" for k, v in fetch_knobs.items()]
    lines += [f"{k}: {v}" for k, v in top_knobs.items()]
    lines.append("fields:")
    for name, spec in FIELDS.items():
        lines.append(f"  {name}:")
        lines.append(f"    selector: {json.dumps(spec['selector'])}")
        if "type" in spec:
            lines.append(f"    type: {spec['type']}")
        if "rules" in spec:
            lines.append(f"    rules: {json.dumps(spec['rules'])}")
    contracts_dir.mkdir(parents=True, exist_ok=True)
    path = contracts_dir / f"{CONTRACT_NAME}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------ the run


def sample_keys(keys: list[str], n: int) -> list[str]:
    if n >= len(keys):
        return list(keys)
    step = len(keys) / n
    return [keys[int(i * step)] for i in range(n)]


def measure_raw(site: sitegen.Site, base_url: str, workdir: Path, when: str) -> Row:
    targets = [(k, base_url + p.path, p.facts["sku"]) for k, p in site.products.items()]
    load_before = load_average()
    result = run_worker("raw", {"targets": targets}, dict(os.environ), workdir)
    truth = site.truth()
    correct, total, wrong = check_values(result["records"], truth, sorted(truth))
    notes = [f"  load average before {load_before}, after {load_average()}"]
    notes += [f"  refused by validation: {k}: {v}" for k, v in list(result["problems"].items())[:3]]
    return Row(f"(a) raw httpx+lxml, {when}", len(targets), result["seconds"], result["peak_rss_kb"] / 1024, correct,
               total, notes + [f"  wrong: {w}" for w in wrong])


def measure_single(instance_env: InstanceEnv, contracts_dir: Path, keys: list[str], truth: dict[str, Any],
                   workdir: Path) -> Row:
    spec = {"contracts_dir": str(contracts_dir), "contract": CONTRACT_NAME, "keys": keys}
    result = run_worker("partitions", spec, instance_env.env, workdir)
    correct, total, wrong = check_values(accepted_records(instance_env), truth, keys)
    notes = [f"  {len(result['failed'])} run(s) failed: {result['failed'][:5]}"] if result["failed"] else []
    return Row(f"(d) single-partition runs ({instance_env.label})", len(keys), result["seconds"],
               result["peak_rss_kb"] / 1024, correct, total, notes + [f"  wrong: {w}" for w in wrong])


def batched_rows(instance_env: InstanceEnv, mode: str, site: sitegen.Site, contracts_dir: Path, workdir: Path,
                 seed: int, round_no: int, timeout: float) -> list[Row]:
    """A first sweep, then a few pages changed, then a second sweep, on one fresh instance; with the queue under
    one daemon started for them."""
    queued = mode == Mode.QUEUE
    first, second = ("(q) queued, first sweep", "(r) queued, second sweep") if queued else \
        ("(b) batched, first sweep", "(c) batched, second sweep")
    rows = []
    with Daemon(instance_env, workdir) if queued else contextlib.nullcontext() as daemon:
        tag = uuid.uuid4().hex[:8]
        rows.append(_announce(batched_sweep(f"{first} ({instance_env.label})", instance_env, contracts_dir,
                                            f"bench-{tag}-1", site.truth(), timeout, daemon)))
        changed, touched = sitegen.mutate_site(site, seed, round_no)
        row = batched_sweep(f"{second} ({instance_env.label})", instance_env, contracts_dir,
                            f"bench-{tag}-2", site.truth(), timeout, daemon)
        row.notes.insert(1, f"  before it: {len(changed)} page(s) changed, {len(touched)} rewritten with the "
                            f"same bytes, {len(site.products) - len(changed) - len(touched)} untouched")
        rows.append(_announce(row))
    return rows


def raw_rate(rows: list[Row]) -> float:
    """pages/s of the raw loop: the mean of its runs (before and after the project's paths)."""
    rates = [r.rate for r in rows if r.path.startswith("(a)")]
    return sum(rates) / len(rates) if rates else 0.0


def print_table(rows: list[Row]) -> None:
    raw = raw_rate(rows)
    header = f"{'path':<42} {'pages':>6} {'seconds':>8} {'pages/s':>8} {'x_raw':>6} {'peak_MB':>11}  correct"
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        x_raw = f"{r.rate / raw:.3f}" if raw else "-"
        rss = f"{r.peak_rss_mb:.0f}" if r.peak_rss_mb else "-"
        print(f"{r.path:<42} {r.pages:>6} {r.seconds:>8.2f} {r.rate:>8.1f} {x_raw:>6} {rss:>11}  "
              f"{r.correct}/{r.total}")
    all_ok = all(r.correct == r.total for r in rows)
    if raw:
        print(f"x_raw: against the raw loop's mean rate in this run, {raw:.1f} pages/s")
    print(f"\n{'every extracted value correct' if all_ok else 'SOME VALUES WRONG OR MISSING'} "
          f"({sum(r.correct for r in rows)}/{sum(r.total for r in rows)} values across {len(rows)} paths)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000, help="product pages to generate (default 2000)")
    parser.add_argument("--sample", type=int, default=20, help="targets for the single-partition path (d)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--server", choices=["auto", "nginx", "python"], default="auto")
    pg = parser.add_mutually_exclusive_group()
    pg.add_argument("--postgres", action="store_true", help="require the PostgreSQL pass (default: when reachable)")
    pg.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--paths", default="raw,single,batch,queue",
                        help="comma-separated subset of raw,single,batch,queue (default: all)")
    parser.add_argument("--profiles", default="sqlite,postgres",
                        help="instance profiles for batch/queue: sqlite (dagster.yaml), postgres "
                             "(deploy/dagster.postgres.yaml), postgres-async (the same with DAGSTER_PG_URL "
                             "turning synchronous_commit off, as docs/production.md recommends for large "
                             "sweeps); default sqlite,postgres")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="fetch.concurrency (per host) for the batch path, if the contract model has it")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch_size for the batch path, if the contract model has it (default: the project's)")
    parser.add_argument("--chunks", type=int, default=None,
                        help="SCRAPE_CONTRACTS_CHUNKS for the batch and queue paths: chunk steps per batched run "
                             "(default: the project's)")
    parser.add_argument("--parallel", type=int, default=None,
                        help="the in-process command's --parallel: batched runs at once, each in a process of its "
                             "own (default: the project's)")
    parser.add_argument("--no-raw-again", dest="raw_again", action="store_false",
                        help="measure the raw loop once, before the other paths (default: before and after)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (site, homes, logs)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="sample each batched sweep with py-spy (pip install py-spy) into collapsed stacks "
                             "in this folder; the figures of a profiled run are not comparable")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global PROFILE_DIR, PARALLEL
    PARALLEL = args.parallel
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE_DIR = args.profile.resolve()
    paths = set(args.paths.split(","))
    if args.chunks is not None:  # every instance's environment is copied from this process's (bench_instances)
        os.environ["SCRAPE_CONTRACTS_CHUNKS"] = str(args.chunks)
    workdir = Path(tempfile.mkdtemp(prefix="sc-throughput-"))
    # SIGTERM unwinds like Ctrl-C, so the daemon, server and database are cleaned up on the way out
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    rows: list[Row] = []
    try:
        started = time.perf_counter()
        site = sitegen.generate_site(workdir / "site", args.pages, args.seed)
        sizes = [(site.root / p.path.lstrip("/")).stat().st_size for p in site.products.values()]
        print(f"site: {len(sizes)} pages, {sum(sizes) / 1e6:.1f} MB, {min(sizes) / 1e3:.0f}–{max(sizes) / 1e3:.0f} KB "
              f"(mean {sum(sizes) / len(sizes) / 1e3:.0f}), {len(sitegen.PRICE_FORMATS)} price formats, "
              f"generated in {time.perf_counter() - started:.1f}s (seed {args.seed})")
        with sitegen.SiteServer(site.root, args.server) as server:
            print(f"server: {server.kind} ({server.version}) on {server.base_url}, pid {server.pid}")
            print(f"machine: {os.cpu_count()} cores, load average {load_average()} (1, 5, 15 min)")
            fetch_knobs, top_knobs = batch_knobs(args.concurrency, args.batch_size)
            contracts_dir = workdir / "contracts"
            write_contract(contracts_dir, site, server.base_url, fetch_knobs, top_knobs)
            print(f"contract: {contracts_dir / (CONTRACT_NAME + '.yaml')} ({describe_knobs(fetch_knobs, top_knobs)}; "
                  f"chunks: {os.environ.get('SCRAPE_CONTRACTS_CHUNKS') or 'project default'})")
            rows += run_paths(args, paths, site, server.base_url, contracts_dir, workdir)
        print_table(rows)
        for r in rows:
            if r.notes:
                print(f"\n{r.path}:")
                print("\n".join(r.notes))
        if args.json:
            raw = raw_rate(rows)
            args.json.write_text(json.dumps([{**r.__dict__, "pages_per_s": r.rate,
                                              "x_raw": r.rate / raw if raw else None} for r in rows], indent=1))
        return 0 if rows and all(r.correct == r.total for r in rows) else 1
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def run_paths(args: argparse.Namespace, paths: set[str], site: sitegen.Site, base_url: str, contracts_dir: Path,
              workdir: Path) -> list[Row]:
    rows = []
    timeout = max(900.0, args.pages * 1.5)
    if "raw" in paths:
        rows.append(_announce(measure_raw(site, base_url, workdir, "before")))
    if "single" in paths:
        keys = sample_keys(sorted(site.products), args.sample)
        single = sqlite_instance(workdir, contracts_dir, "single")
        rows.append(_announce(measure_single(single, contracts_dir, keys, site.truth(), workdir)))
    modes = [mode for mode, path in ((Mode.IN_PROCESS, "batch"), (Mode.QUEUE, "queue")) if path in paths]
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in profiles if p not in ("sqlite", "postgres", "postgres-async")]
    if unknown:
        raise SystemExit(f"--profiles: unknown {', '.join(unknown)} (sqlite, postgres, postgres-async)")
    on_postgres = [p for p in profiles if p.startswith("postgres")]
    if on_postgres and (args.skip_postgres or not postgres_reachable()):
        if args.postgres:
            raise SystemExit(f"--postgres: PostgreSQL is not reachable at {PG_ADMIN_URL}")
        if modes:
            print(f"{', '.join(on_postgres)} profile: skipped: " + (
                "--skip-postgres" if args.skip_postgres else f"not reachable at {PG_ADMIN_URL}"))
        profiles = [p for p in profiles if p not in on_postgres]
    round_no = 0
    for profile in profiles:
        for mode in modes:
            round_no += 1
            name = f"{profile}-{mode}"
            with (postgres_instance(workdir, contracts_dir, name, async_commits=profile == "postgres-async")
                  if profile.startswith("postgres")
                  else contextlib.nullcontext(sqlite_instance(workdir, contracts_dir, name))) as instance_env:
                rows += batched_rows(instance_env, mode, site, contracts_dir, workdir, args.seed, round_no, timeout)
    if "raw" in paths and len(rows) > 1 and args.raw_again:
        # measured again at the end: the machine's other work moves the raw loop too; x_raw is against the mean
        rows.append(_announce(measure_raw(site, base_url, workdir, "after")))
    return rows


def _announce(row: Row) -> Row:
    print(f"measured {row.path}: {row.pages} pages in {row.seconds:.2f}s = {row.rate:.1f} pages/s, "
          f"{row.correct}/{row.total} values correct", flush=True)
    return row


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("_raw", "_partitions"):
        worker = raw_worker if sys.argv[1] == "_raw" else partitions_worker
        Path(sys.argv[3]).write_text(json.dumps(worker(json.loads(Path(sys.argv[2]).read_text()))))
        sys.exit(0)
    sys.exit(main())
