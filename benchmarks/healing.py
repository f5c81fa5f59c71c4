"""Healing benchmark: the healer against the naive "old selector on the new page", on the mutation suite.

Run from the repo root, venv active: ``python benchmarks/healing.py [--seeds N] [--seed-offset K]
[--changes old|new|all] [--verbose] [--sweep PARAM=V1,V2,...|none] [--themes [CACHE]]``. Exit code 1
when a target is
missed: wrong <= 0.5%, correct >= 95% where the value is still on the page, every field removed from
the page refused (and every other field whose expected outcome is a refusal).

The suite is the first generation of change kinds plus the second (issue 15: a redesign keeping only
JSON-LD, a moved section with changed values, translated labels, an earlier layout coming back, date and
link fields); ``--changes`` picks one. Also printed: healing from stored fingerprints only (the old page
deleted) beside healing from the old page; the correct/wrong trade-off when one ``HealPolicy`` threshold
is swept (default ``min_score``; a dotted name reaches the nested weights, e.g. ``weights.value``); and
the heal time per field on a 60 KB shop page (``sitegen.py``'s product page, grown to 60 KB, its classes
renamed by a new CSS build so every selector breaks; target <= 5 ms of CPU per field, the best of seven
runs, reported, not enforced: on a shared machine wall-clock time mostly measures the load, so it is
printed beside, with the load average).

A "case" in the printed numbers is one field to heal (n counts fields; sec/case is time per field, page
parsing included). correct = returned the expected value; wrong = returned another value, or any value
where a refusal was expected; refused = returned None.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import sitegen  # benchmarks/ is the script's folder, so on sys.path
import themes

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.heal import DEFAULT_POLICY, HealPolicy, heal, remember
from scrape_contracts.engine.select import parse_html, select_texts
from scrape_contracts.testing.mutations import (
    ALL_CHANGE_KINDS,
    CHANGE_KINDS,
    NEW_CHANGE_KINDS,
    REFUSE,
    HealCase,
    build_cases,
)

MAX_WRONG_PCT = 0.5
MIN_CORRECT_PRESENT_PCT = 95.0
DEFAULT_SWEEP = "min_score=0.20,0.26,0.32,0.37,0.42,0.47,0.52,0.60"
MAX_MS_PER_FIELD = 5.0


@dataclass(frozen=True)
class Outcome:
    case: HealCase
    field: str
    expected: Any
    got: Any

    @property
    def verdict(self) -> str:
        if self.got is None:
            return "refused"
        if self.expected == REFUSE or not _same(self.got, self.expected):
            return "wrong"
        return "correct"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9)
        except (TypeError, ValueError):
            return False
    return type(a) is type(b) and a == b


def naive(case: HealCase) -> dict[str, Any]:
    root = parse_html(case.after_html)
    out: dict[str, Any] = {}
    for name, spec in case.fields.items():
        texts = [t for t in select_texts(root, spec["selector"]) if t]
        if not texts:
            out[name] = None
            continue
        try:
            out[name] = parse_value(texts[0], spec.get("type", "string"), base_url=case.page_url)
        except ValueParseError:
            out[name] = None
    return out


REASONS: Counter[str] = Counter()  # why the healer refused, over the suite (healed() counts them)


def healed(case: HealCase, policy: HealPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    results = heal(case.before_html, case.after_html, case.fields, policy=policy, page_url=case.page_url)
    if policy is DEFAULT_POLICY:
        REASONS.update(r.evidence.get("reason") for r in results.values() if not r.healed)
    return {name: result.value for name, result in results.items()}


def healed_from_fingerprints(case: HealCase, policy: HealPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """The old page deleted: only what ``remember`` stored at acceptance is left to heal from."""
    memories = remember(case.before_html, case.fields, policy=policy, page_url=case.page_url)
    results = heal(None, case.after_html, case.fields, policy=policy, memories=memories,
                   page_url=case.page_url)
    return {name: result.value for name, result in results.items()}


def run(cases: list[HealCase], method) -> tuple[list[Outcome], float]:
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    for case in cases:
        values = method(case)
        outcomes.extend(Outcome(case, name, case.expected[name], values[name]) for name in case.fields)
    return outcomes, (time.perf_counter() - started) / max(1, len(outcomes))


def _pcts(outcomes: list[Outcome]) -> dict[str, float]:
    n = max(1, len(outcomes))
    return {v: 100.0 * sum(o.verdict == v for o in outcomes) / n for v in ("correct", "wrong", "refused")}


def _line(label: str, outcomes: list[Outcome], sec: float) -> str:
    p = _pcts(outcomes)
    return (
        f"{label:<8} correct={p['correct']:.1f}% wrong={p['wrong']:.1f}% refused={p['refused']:.1f}% "
        f"n={len(outcomes)}  sec/case={sec:.4f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="list every non-correct healer outcome")
    parser.add_argument("--changes", choices=("old", "new", "all"), default="all",
                        help="the first suite's change kinds, the second generation's, or both (default)")
    parser.add_argument("--sweep", default=DEFAULT_SWEEP,
                        help=f"a HealPolicy threshold and its values, or none (default {DEFAULT_SWEEP})")
    parser.add_argument("--themes", type=Path, metavar="CACHE", nargs="?", const=themes.DEFAULT_CACHE,
                        help="also the real-layout corpus (benchmarks/themes.py; installs Hexo themes "
                        f"from the npm registry into CACHE, default {themes.DEFAULT_CACHE})")
    args = parser.parse_args(argv)

    kinds = {"old": CHANGE_KINDS, "new": NEW_CHANGE_KINDS, "all": ALL_CHANGE_KINDS}[args.changes]
    cases = build_cases(seeds=range(args.seed_offset, args.seed_offset + args.seeds), changes=kinds)
    heal_out, heal_sec = run(cases, healed)
    naive_out, naive_sec = run(cases, naive)
    print(_line("healing:", heal_out, heal_sec))
    print(_line("naive:", naive_out, naive_sec))

    print("\nper change kind            healing c/w/r %          naive c/w/r %     n   on page c %   "
          "removed refused")
    by_change: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(heal_out):
        by_change[o.case.change].append(i)
    for change, idx in by_change.items():
        h, nv = _pcts([heal_out[i] for i in idx]), _pcts([naive_out[i] for i in idx])
        gone = [heal_out[i] for i in idx if heal_out[i].case.removed(heal_out[i].field)]
        refused = sum(o.verdict == "refused" for o in gone)
        shown = [heal_out[i] for i in idx if heal_out[i].expected != REFUSE]
        on_page = f"{_pcts(shown)['correct']:5.1f}" if shown else "    -"
        print(
            f"  {change:<22} {h['correct']:5.1f} {h['wrong']:5.1f} {h['refused']:5.1f}      "
            f"{nv['correct']:5.1f} {nv['wrong']:5.1f} {nv['refused']:5.1f}   {len(idx):4d}   "
            f"{on_page}         "
            + (f"{refused}/{len(gone)}" if gone else "-")
        )
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(heal_out):
        by_kind[o.case.kind].append(i)
    print("\nper page kind")
    for kind, idx in by_kind.items():
        h = _pcts([heal_out[i] for i in idx])
        print(f"  {kind:<22} {h['correct']:5.1f} {h['wrong']:5.1f} {h['refused']:5.1f}   {len(idx):4d}")

    for label, group in (("previous suite", CHANGE_KINDS), ("second generation", NEW_CHANGE_KINDS)):
        part = [o for o in heal_out if o.case.change in group]
        if part:
            on_page = _pcts([o for o in part if o.expected != REFUSE])
            print(f"{label + ':':<19} {_line('', part, heal_sec).strip()}  on page correct "
                  f"{on_page['correct']:.1f}% wrong {on_page['wrong']:.1f}%")
    present = [o for o in heal_out if o.expected != REFUSE]
    present_naive = [o for o in naive_out if o.expected != REFUSE]
    must_refuse = [o for o in heal_out if o.expected == REFUSE]
    removed = [o for o in must_refuse if o.case.removed(o.field)]
    present_correct = _pcts(present)["correct"]
    wrong = _pcts(heal_out)["wrong"]
    removed_refused = sum(o.verdict == "refused" for o in removed)
    all_refused = sum(o.verdict == "refused" for o in must_refuse)
    print(
        f"\nvalue still on page: healing correct={present_correct:.1f}% "
        f"naive correct={_pcts(present_naive)['correct']:.1f}% n={len(present)}"
    )
    print(f"field removed:       refused {removed_refused}/{len(removed)} (removed from the page)")
    print(
        f"must refuse (all):   refused {all_refused}/{len(must_refuse)} (also: value beyond the change limit)"
    )

    total = max(1, sum(REASONS.values()))
    shares = ", ".join(f"{r} {100 * c / total:.0f}%" for r, c in REASONS.most_common())
    print(f"refusal reasons:     {shares}")

    memory_out, memory_sec = run(cases, healed_from_fingerprints)
    side_by_side(heal_out, memory_out, memory_sec)

    if args.sweep != "none":
        sweep(cases, args.sweep)
    page_timing()

    if args.verbose:
        for o in heal_out:
            if o.verdict != "correct":
                print(
                    f"  {o.verdict:<7} {o.case.case_id:<34} {o.field:<16} "
                    f"expected={o.expected!r} got={o.got!r}"
                )

    failures = []
    if wrong > MAX_WRONG_PCT:
        failures.append(f"wrong {wrong:.1f}% > {MAX_WRONG_PCT}%")
    if present_correct < MIN_CORRECT_PRESENT_PCT:
        failures.append(
            f"correct {present_correct:.1f}% < {MIN_CORRECT_PRESENT_PCT}% where the value is on the page"
        )
    if removed_refused != len(removed):
        failures.append(f"{len(removed) - removed_refused} removed field(s) not refused")
    if all_refused != len(must_refuse):
        failures.append(f"{len(must_refuse) - all_refused} field(s) that must be refused were healed")
    print("\nTARGETS MET" if not failures else "\nTARGETS MISSED: " + "; ".join(failures))
    if args.themes is not None:
        print("\nthe real-layout corpus (benchmarks/themes.py)")
        if themes.main(["--cache", str(args.themes)]) != 0:
            failures.append("the real-layout corpus")
    return 1 if failures else 0


def side_by_side(page_out: list[Outcome], memory_out: list[Outcome], sec: float) -> None:
    """Healing from the old page vs from stored fingerprints only (the old page deleted)."""
    print("\nold page deleted: healing from stored fingerprints only, beside healing from the old page")
    print(_line("fingerpr:", memory_out, sec))
    print("  per change kind            from page c/w/r %     from fingerprints c/w/r %   correct ratio")
    by_change: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(page_out):
        by_change[o.case.change].append(i)
    rows = [*by_change.items(), ("all", list(range(len(page_out))))]
    for change, idx in rows:
        p, m = _pcts([page_out[i] for i in idx]), _pcts([memory_out[i] for i in idx])
        ratio = m["correct"] / p["correct"] if p["correct"] else float("nan")
        print(f"  {change:<22} {p['correct']:5.1f} {p['wrong']:5.1f} {p['refused']:5.1f}      "
              f"{m['correct']:5.1f} {m['wrong']:5.1f} {m['refused']:5.1f}          {ratio:6.3f}")
    present_p = _pcts([o for o in page_out if o.expected != REFUSE])["correct"]
    present_m = _pcts([o for o in memory_out if o.expected != REFUSE])["correct"]
    removed = [o for o in memory_out if o.case.removed(o.field)]
    print(f"  value still on page: correct {present_m:.1f}% from fingerprints vs {present_p:.1f}% from the "
          f"page ({present_m / present_p if present_p else float('nan'):.3f}); removed refused "
          f"{sum(o.verdict == 'refused' for o in removed)}/{len(removed)}")


def _with(policy: Any, name: str, value: float) -> Any:
    """``policy`` with the (dotted) field ``name`` set to ``value``."""
    head, _, rest = name.partition(".")
    if rest:
        return replace(policy, **{head: _with(getattr(policy, head), rest, value)})
    current = getattr(policy, head)  # an unknown name fails here, naming it
    return replace(policy, **{head: type(current)(value)})


def _get(policy: Any, name: str) -> Any:
    for part in name.split("."):
        policy = getattr(policy, part)
    return policy


def sweep(cases: list[HealCase], spec: str) -> None:
    """The suite again per value of one policy threshold: the correct/wrong trade-off curve."""
    name, _, values = spec.partition("=")
    default = _get(DEFAULT_POLICY, name)
    print(f"\nsweep of HealPolicy.{name} (default {default}): correct/wrong/refused %, all fields and "
          "where the value is still on the page")
    print(f"  {name:>22}   all c/w/r %            on page c/w %     removed refused")
    for raw in values.split(","):
        policy = _with(DEFAULT_POLICY, name, float(raw))
        outcomes, _ = run(cases, lambda case: healed(case, policy))
        p = _pcts(outcomes)
        present = _pcts([o for o in outcomes if o.expected != REFUSE])
        removed = [o for o in outcomes if o.case.removed(o.field)]
        refused = sum(o.verdict == "refused" for o in removed)
        mark = "*" if _get(policy, name) == default else " "
        print(f"  {mark}{raw:>21}   {p['correct']:5.1f} {p['wrong']:4.1f} {p['refused']:5.1f}        "
              f"{present['correct']:5.1f} {present['wrong']:4.1f}        {refused}/{len(removed)}")


# a new CSS build renames the classes of the product block (and of the related cards, which share them)
_RENAMED = {"summary": "css-q8x2ma", "product-title": "css-1v3ktz", "meta": "css-2b9xqw",
            "sku": "css-7hqp1k", "price__now": "css-4kx0ff", "availability": "css-m2b8zr",
            "stock": "css-h83jqv", "rating-summary": "css-x7c0pd", "byline": "css-9slx1t"}
_SELECTORS = {"title": ".summary h1.product-title", "sku": ".meta .sku", "price": ".summary .price__now",
              "in_stock": ".availability .stock", "rating": ".rating-summary > span:nth-of-type(2)",
              "review_count": ".rating-summary a span", "brand": ".byline a"}
_TYPES = {"price": "price", "in_stock": "boolean", "rating": "number", "review_count": "integer"}
PAGE_BYTES = 60_000


def page_timing(repeats: int = 7) -> None:
    """Heal time per field on a 60 KB product page whose every selector broke."""
    text = sitegen._Text(7)
    pages = ((p, sitegen.render_page(p, text)) for p in (sitegen.new_product(i, 7) for i in range(40)))
    product, before = max(pages, key=lambda pair: len(pair[1].encode()))
    rng = random.Random(1)
    while len(before.encode()) < PAGE_BYTES:  # the largest generated page is a little short of 60 KB
        before = before.replace('</section><section class="specs">',
                                f'<p>{text.paragraph(rng)}</p></section><section class="specs">', 1)
    after = re.sub(r'class="([^"]*)"',
                   lambda m: 'class="' + " ".join(_RENAMED.get(c, c) for c in m.group(1).split()) + '"',
                   before)
    fields = {name: {"selector": sel, "before": product.facts[name], "type": _TYPES.get(name, "string")}
              for name, sel in _SELECTORS.items()}
    results = heal(before, after, fields)  # warm-up, and the verdicts
    right = sum(_same(results[n].value, product.facts[n]) for n in fields)
    wrong = sum(results[n].healed and not _same(results[n].value, product.facts[n]) for n in fields)
    every, one, cpu = [], [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        heal(before, after, fields)
        every.append((time.perf_counter() - started) / len(fields))
        cpu.append((time.process_time() - started_cpu) / len(fields))
        started = time.perf_counter()
        heal(before, after, {"price": fields["price"]})
        one.append(time.perf_counter() - started)
    per_field = statistics.median(every) * 1000
    cpu_per_field = min(cpu) * 1000  # the least the machine's other work added
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n60 KB page ({len(after.encode()):,} bytes, {len(fields)} broken selectors): healed {right} "
          f"correctly, {wrong} wrong; {repeats} runs, page parsing included, load average {load:.1f}")
    print(f"  {cpu_per_field:.1f} ms of CPU per field healing all {len(fields)} in one call (best run); "
          f"wall clock {per_field:.1f} ms per field (median), {statistics.median(one) * 1000:.1f} ms for one "
          "field alone")
    verdict = "met" if cpu_per_field <= MAX_MS_PER_FIELD else "MISSED"
    print(f"  target <= {MAX_MS_PER_FIELD:.0f} ms of CPU per field: {verdict} (reported, not enforced)")


if __name__ == "__main__":
    raise SystemExit(main())
