"""Healing benchmark: the healer against the naive "old selector on the new page", on the mutation suite.

Run from the repo root, venv active: ``python benchmarks/healing.py [--seeds N] [--seed-offset K] [--verbose]``. Exit
code 1 when a target is missed: wrong <= 1%, correct >= 90% where the value is still on the page, every
removed field refused (and every other field whose expected outcome is a refusal).

A "case" in the printed numbers is one field to heal (n counts fields; sec/case is time per field, page
parsing included). correct = returned the expected value; wrong = returned another value, or any value
where a refusal was expected; refused = returned None.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.heal import heal
from scrape_contracts.engine.select import parse_html, select_texts
from scrape_contracts.testing.mutations import REFUSE, REMOVAL_KINDS, HealCase, build_cases

MAX_WRONG_PCT = 1.0
MIN_CORRECT_PRESENT_PCT = 90.0


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
            out[name] = parse_value(texts[0], spec.get("type", "string"))
        except ValueParseError:
            out[name] = None
    return out


def healed(case: HealCase) -> dict[str, Any]:
    return {
        name: result.value for name, result in heal(case.before_html, case.after_html, case.fields).items()
    }


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
    args = parser.parse_args(argv)

    cases = build_cases(seeds=range(args.seed_offset, args.seed_offset + args.seeds))
    heal_out, heal_sec = run(cases, healed)
    naive_out, naive_sec = run(cases, naive)
    print(_line("healing:", heal_out, heal_sec))
    print(_line("naive:", naive_out, naive_sec))

    print("\nper change kind            healing c/w/r %          naive c/w/r %     n")
    by_change: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(heal_out):
        by_change[o.case.change].append(i)
    for change, idx in by_change.items():
        h, nv = _pcts([heal_out[i] for i in idx]), _pcts([naive_out[i] for i in idx])
        print(
            f"  {change:<22} {h['correct']:5.1f} {h['wrong']:5.1f} {h['refused']:5.1f}      "
            f"{nv['correct']:5.1f} {nv['wrong']:5.1f} {nv['refused']:5.1f}   {len(idx):4d}"
        )
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(heal_out):
        by_kind[o.case.kind].append(i)
    print("\nper page kind")
    for kind, idx in by_kind.items():
        h = _pcts([heal_out[i] for i in idx])
        print(f"  {kind:<22} {h['correct']:5.1f} {h['wrong']:5.1f} {h['refused']:5.1f}   {len(idx):4d}")

    present = [o for o in heal_out if o.expected != REFUSE]
    present_naive = [o for o in naive_out if o.expected != REFUSE]
    must_refuse = [o for o in heal_out if o.expected == REFUSE]
    removed = [o for o in must_refuse if o.case.change in REMOVAL_KINDS and o.field in o.case.targeted]
    present_correct = _pcts(present)["correct"]
    wrong = _pcts(heal_out)["wrong"]
    removed_refused = sum(o.verdict == "refused" for o in removed)
    all_refused = sum(o.verdict == "refused" for o in must_refuse)
    print(
        f"\nvalue still on page: healing correct={present_correct:.1f}% "
        f"naive correct={_pcts(present_naive)['correct']:.1f}% n={len(present)}"
    )
    print(f"field removed:       refused {removed_refused}/{len(removed)} (removed field, decoy only)")
    print(
        f"must refuse (all):   refused {all_refused}/{len(must_refuse)} (also: value beyond the change limit)"
    )

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
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
