"""List extraction benchmark: time per item of one list target of 2,000, 20,000 and 100,000 items.

Run from the repo root, venv active: ``python benchmarks/lists.py [--sizes 2000,20000,100000] [--repeat 3]``.
Exit code 1 when the time per item of a size is more than 30% away from the median over the sizes: the
work must be linear in the items (it was quadratic: each item's selector budget counted the whole page).

Each size is one page of that many product items (id attribute, name, price, link: the link fields make
every item resolve against the page's base), extracted by ``engine.lists.extract_records`` with the
default limits, page parsing included. The figure is CPU seconds of this process (``time.process_time``),
the best of ``--repeat`` runs: on a shared machine wall-clock time mostly measures the load, so it is
printed beside, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.limits import Limits
from scrape_contracts.engine.lists import extract_records

TOLERANCE = 0.30
FIELDS = {"id": FieldSpec(selector="::attr(data-id)"), "name": FieldSpec(selector=".name"),
          "price": FieldSpec(selector=".price", type="price"), "link": FieldSpec(selector="a::attr(href)",
                                                                                  type="url")}


def page_of(items: int) -> str:
    rows = "".join(f'<li class="product" data-id="p{i}"><a class="name" href="/p/{i}">Item {i}</a>'
                   f'<span class="price">{i % 997}.50</span></li>' for i in range(items))
    return (f"<!doctype html><html><head><title>catalogue</title></head><body><h1>Catalogue</h1>"
            f"<ul class='products'>{rows}</ul><footer>end</footer></body></html>")


def measure(items: int, repeat: int) -> tuple[float, float, int]:
    """(best CPU seconds, wall seconds of that run, page bytes)."""
    html = page_of(items)
    limits = Limits(list_max_items=max(items, Limits().list_max_items))
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        found = extract_records(html, FIELDS, {}, "li.product", ["id"], limits=limits,
                                page_url="https://shop.example/catalogue")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if found.items != items or found.problems:
            raise SystemExit(f"{items} items: extracted {found.items}, problems {found.problems[:2]}")
        best = min(best, (cpu, wall))
    return best[0], best[1], len(html.encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f}, best of {args.repeat}")
    print(f"{'items':>8} {'page_MB':>8} {'cpu_s':>8} {'wall_s':>8} {'us/item':>8}")
    per_item = {}
    for items in sizes:
        cpu, wall, size = measure(items, args.repeat)
        per_item[items] = cpu / items * 1e6
        print(f"{items:>8,} {size / 1e6:>8.2f} {cpu:>8.2f} {wall:>8.2f} {per_item[items]:>8.1f}")
    median = statistics.median(per_item.values())
    off = {n: v / median - 1 for n, v in per_item.items()}
    print("per item against the median: " + ", ".join(f"{n:,}: {d:+.0%}" for n, d in off.items()))
    if any(abs(d) > TOLERANCE for d in off.values()):
        print(f"FAIL: time per item is not flat within ±{TOLERANCE:.0%}")
        return 1
    print(f"ok: time per item flat within ±{TOLERANCE:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
