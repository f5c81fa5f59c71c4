"""A deterministic shop of product pages for benchmarks, and a static server for it on 127.0.0.1.

``generate_site(root, n, seed)`` writes ``n`` product pages (30–60 KB each: header and nav, breadcrumbs,
gallery, long description, spec table, reviews with their own ratings, related-product cards with their
own prices and SKUs, a cart total, styles and scripts) and returns the truth: per page the 7 facts a
contract extracts (title, sku, price, in_stock, rating, review_count, brand). The same seed gives the same
bytes. ``mutate_site`` changes some pages (new price, stock, reviews) and rewrites others with the same
bytes, for a second sweep where most pages are unchanged.

``SiteServer`` serves the folder with ETag/If-None-Match and Last-Modified/If-Modified-Since (304): nginx
when it is installed, otherwise a threaded Python server (``python benchmarks/sitegen.py serve ROOT PORT``).
It only ever listens on 127.0.0.1, runs as a child process, and is stopped by its PID.
"""

from __future__ import annotations

import email.utils
import html
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
MIN_BYTES, MAX_BYTES = 30_000, 60_000
FIELDS = ("title", "sku", "price", "in_stock", "rating", "review_count", "brand")

_WORDS = """
ergonomic stainless compact premium durable lightweight wireless portable adjustable cordless quiet
powerful versatile modern classic sturdy elegant reliable efficient waterproof rechargeable foldable
kitchen garden office travel outdoor indoor studio workshop family everyday professional home
design finish handle blade motor battery cable filter lid base frame cover strap pocket panel switch
delivers keeps makes offers combines features includes supports fits lets provides brings handles
easy fast smooth precise gentle safe clean simple bright warm soft strong steady natural balanced
the a with and for your every of to in on from while without over under after before between
minutes hours days years speed power capacity weight size colour material texture performance
customers reviewers owners users buyers cooks gardeners makers travellers parents students
""".split()
_ADJ = ["Pro", "Max", "Lite", "Plus", "Compact", "Classic", "Ultra", "Mini", "XL", "Eco", "Smart", "Studio"]
_NOUNS = ["Blender", "Kettle", "Toaster", "Headphones", "Backpack", "Desk Lamp", "Drill", "Coffee Grinder",
          "Air Fryer", "Speaker", "Monitor Arm", "Tent", "Rain Jacket", "Trail Shoes", "Chef's Knife",
          "Cast Iron Pan", "Router", "Keyboard", "Office Chair", "Water Bottle", "Vacuum", "Fan", "Scale"]
_BRANDS = ["Acme", "Northwind", "Brightline", "Kessler & Co", "Orbis", "Fjällmark", "Tanaka Works", "Luma",
           "Stonebridge", "Vireo", "Halden", "Müller Haus", "Pinecrest", "Cobalt", "Redfern", "Aurora Labs"]
_CATEGORIES = ["Home", "Kitchen", "Garden", "Outdoor", "Electronics", "Office", "Tools", "Sports", "Travel",
               "Audio", "Lighting", "Furniture", "Appliances", "Clothing", "Shoes", "Storage", "Gifts"]
_STOCK_TEXT = {True: ["In stock", "Available"], False: ["Out of stock", "Sold out"]}
NBSP = "\u00a0"


def _de(amount: float, decimals: int = 2) -> str:
    """1299.5 → '1.299,50' (German/French grouping)."""
    text = f"{amount:,.{decimals}f}"
    return text.replace(",", "\x00").replace(".", ",").replace("\x00", ".")


# (name, currency, renders an amount, whole amounts only)
PRICE_FORMATS: list[tuple[str, str, Any, bool]] = [
    ("usd", "USD", lambda a: f"${a:,.2f}", False),                      # $1,299.00
    ("eur_de", "EUR", lambda a: f"{_de(a)} €", False),                  # 1.299,00 €
    ("gbp", "GBP", lambda a: f"£{a:,.2f}", False),                      # £12.50
    ("usd_code", "USD", lambda a: f"USD {a:,.0f}", True),               # USD 45
    ("eur_code", "EUR", lambda a: f"{_de(a)} EUR", False),              # 12,50 EUR
    ("eur_fr", "EUR", lambda a: f"{_de(a).replace('.', NBSP)} €", False),  # 1 299,00 €
    ("chf", "CHF", lambda a: "CHF " + f"{a:,.2f}".replace(",", "'"), False),  # CHF 1'299.00
]
_FORMAT_BY_NAME = {f[0]: f for f in PRICE_FORMATS}


def render_price(amount: float, fmt: str) -> str:
    return _FORMAT_BY_NAME[fmt][2](amount)


def page_key(i: int) -> str:
    return f"p{i:05d}"


@dataclass
class Product:
    """The facts of one page (the truth) plus what is needed to render it again identically."""

    key: str
    path: str
    seed: str
    price_format: str
    was_price: float | None
    stock_text: str
    facts: dict[str, Any]


def _amount(rng: random.Random, whole: bool) -> float:
    value = rng.choice([rng.uniform(3, 60), rng.uniform(20, 400), rng.uniform(200, 2500)])
    return float(round(value)) if whole else round(value, 2)


def new_product(i: int, seed: int) -> Product:
    rng = random.Random(f"product:{seed}:{i}")
    brand = rng.choice(_BRANDS)
    title = f"{brand} {rng.choice(_ADJ)} {rng.choice(_NOUNS)} {rng.randint(100, 9900)}"
    if rng.random() < 0.3:
        title += f" — {rng.choice(['Stainless Steel', 'Black', 'Graphite', 'Sage & Cream', '2-Pack'])}"
    fmt = rng.choice(PRICE_FORMATS)
    price = _amount(rng, fmt[3])
    in_stock = rng.random() < 0.8
    reviews = rng.choice([rng.randint(1, 40), rng.randint(40, 900), rng.randint(900, 25_000)])
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = "-".join(re.sub(r"[^a-z0-9]+", " ", ascii_title.lower().replace("&", "and")).split())
    return Product(
        key=page_key(i), path=f"/products/{slug}-{i}.html", seed=f"layout:{seed}:{i}", price_format=fmt[0],
        was_price=round(price * rng.uniform(1.1, 1.6), 0 if fmt[3] else 2) if rng.random() < 0.4 else None,
        stock_text=rng.choice(_STOCK_TEXT[in_stock]),
        facts={"title": title, "sku": f"{brand[:2].upper()}-{100000 + i * 7 + rng.randint(0, 6)}",
               "price": price, "in_stock": in_stock, "rating": round(rng.uniform(1.0, 5.0), 1),
               "review_count": reviews, "brand": brand},
    )


class _Text:
    """Sentences drawn from one pool (built once per seed: fast, and still varied)."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"text:{seed}")
        self.sentences = []
        for _ in range(600):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 22))]
            self.sentences.append(" ".join(words).capitalize() + rng.choice([".", ".", ".", "!", "?"]))

    def paragraph(self, rng: random.Random, lo: int = 3, hi: int = 8) -> str:
        return " ".join(rng.choice(self.sentences) for _ in range(rng.randint(lo, hi)))


def _css(rng: random.Random) -> str:
    rules = []
    for _ in range(rng.randint(40, 90)):
        cls = f".c-{rng.randint(1000, 9999)}-{rng.choice(_WORDS)}"
        rules.append(f"{cls}{{margin:{rng.randint(0, 24)}px {rng.randint(0, 24)}px;color:#{rng.randrange(16**6):06x};"
                     f"font-size:{rng.randint(11, 28)}px;display:{rng.choice(['flex', 'block', 'grid'])}}}")
    return "\n".join(rules)


def _script(rng: random.Random, product: Product, decoy_prices: list[str]) -> str:
    layer = {"event": "view_item", "ecommerce": {"items": [
        {"item_id": product.facts["sku"], "item_name": product.facts["title"], "price": product.facts["price"]},
        *({"item_id": f"REL-{rng.randint(1, 99999)}", "price": p} for p in decoy_prices)]},
        "experiments": {f"exp_{rng.randint(1, 999)}": rng.choice(["a", "b", "control"]) for _ in range(12)}}
    return ("window.dataLayer=window.dataLayer||[];dataLayer.push(" + json.dumps(layer) + ");\n"
            + "".join(f"function f{rng.randint(1, 10**6)}(e){{return e&&e.{rng.choice(_WORDS)}||{rng.randint(0, 99)}}}\n"
                      for _ in range(rng.randint(20, 50))))


def render_page(product: Product, text: _Text) -> str:
    """The HTML of one product page: the facts once in the product block, decoys everywhere else."""
    rng = random.Random(product.seed)
    f = product.facts
    esc = html.escape
    target_size = rng.randint(MIN_BYTES + 2_000, MAX_BYTES - 4_000)
    category = rng.choice(_CATEGORIES)
    fmt = product.price_format
    cards = []
    decoy_prices = []
    for _ in range(rng.randint(4, 8)):
        amount = _amount(rng, _FORMAT_BY_NAME[fmt][3])
        decoy_prices.append(amount)
        name = f"{rng.choice(_BRANDS)} {rng.choice(_ADJ)} {rng.choice(_NOUNS)}"
        cards.append(
            f'<li class="card" itemscope itemtype="https://schema.org/Product">'
            f'<a href="/products/{rng.randint(1, 10**6)}.html"><img src="/img/{rng.randint(1, 10**6)}.webp" alt="">'
            f'<span class="product-title" itemprop="name">{esc(name)}</span></a>'
            f'<div class="price-box"><span class="price__now">{render_price(amount, fmt)}</span></div>'
            f'<span class="sku" itemprop="sku">{rng.choice(_BRANDS)[:2].upper()}-{rng.randint(100000, 999999)}</span>'
            f'<span itemprop="aggregateRating" itemscope><span itemprop="ratingValue">{rng.uniform(1, 5):.1f}</span>'
            f'(<span itemprop="reviewCount">{rng.randint(1, 5000)}</span>)</span></li>')
    nav = "".join(f'<li><a href="/c/{c.lower()}/{rng.randint(1, 999)}">{c} {rng.choice(_WORDS)}</a></li>'
                  for c in rng.choices(_CATEGORIES, k=rng.randint(40, 70)))
    head = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(f["title"])} | Example Shop</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="description" content="{esc(text.paragraph(rng, 1, 2))}">'
        f'<link rel="stylesheet" href="/static/app.{rng.randrange(16**8):08x}.css"><style>{_css(rng)}</style>'
        f'<script>{_script(rng, product, decoy_prices)}</script></head><body class="pdp">'
        f'<header class="site-header"><a class="logo" href="/">Example Shop</a>'
        f'<form class="search" action="/search"><input name="q" placeholder="Search"></form>'
        f'<div class="mini-cart">Cart ({rng.randint(0, 5)}): <span class="cart-total">'
        f'{render_price(_amount(rng, _FORMAT_BY_NAME[fmt][3]), fmt)}</span></div>'
        f'<nav class="main-nav"><ul>{nav}</ul></nav></header>'
        f'<nav class="breadcrumbs"><ol><li><a href="/">Home</a></li><li><a href="/c/{category.lower()}">{category}</a>'
        f'</li><li><a href="/b/{esc(f["brand"].lower())}">{esc(f["brand"])}</a></li><li>{esc(f["title"])}</li></ol></nav>')
    was = (f'<s class="price__was">{render_price(product.was_price, fmt)}</s> ' if product.was_price else "")
    specs = "".join(f"<tr><th>{rng.choice(_WORDS).capitalize()}</th><td>{rng.randint(1, 900)} {rng.choice(_WORDS)}</td></tr>"
                    for _ in range(rng.randint(8, 20)))
    main = (
        f'<main><div class="product-main" itemscope itemtype="https://schema.org/Product">'
        f'<div class="gallery">{"".join(f"<img src=/img/{rng.randint(1, 10**6)}.webp alt=>" for _ in range(6))}</div>'
        f'<div class="summary"><h1 class="product-title" itemprop="name">{esc(f["title"])}</h1>'
        f'<div class="byline">by <a href="/b/x" itemprop="brand">{esc(f["brand"])}</a></div>'
        f'<div class="meta">Item no. <span class="sku" itemprop="sku">{f["sku"]}</span></div>'
        f'<div class="rating-summary" itemprop="aggregateRating" itemscope>'
        f'<span class="stars" aria-hidden="true">{"★" * round(f["rating"])}{"☆" * (5 - round(f["rating"]))}</span> '
        f'<span itemprop="ratingValue">{f["rating"]:.1f}</span> out of 5 '
        f'(<a href="#reviews"><span itemprop="reviewCount">{f["review_count"]:,}</span> reviews</a>)</div>'
        f'<div class="price-box">{was}<span class="price__now">{render_price(f["price"], fmt)}</span> '
        f'<span class="vat">incl. VAT, plus shipping</span></div>'
        f'<p class="availability"><span class="stock">{product.stock_text}</span></p>'
        f'<form class="add-to-cart"><input type="number" value="1"><button>Add to cart</button></form></div>'
        f'<section class="description"><h2>Description</h2>'
    )
    tail = (f'</section><section class="specs"><h2>Specifications</h2><table>{specs}</table></section></div>'
            f'<section class="related"><h2>Customers also bought</h2><ul>{"".join(cards)}</ul></section>')
    footer = (f'<footer><ul>{nav[: len(nav) // 2]}</ul><p>Prices include VAT. Free shipping from '
              f'{render_price(49.0, fmt)}.</p></footer><script src="/static/app.{rng.randrange(16**8):08x}.js" defer>'
              f'</script></body></html>')
    description = []
    reviews = []
    size = len(head) + len(main) + len(tail) + len(footer) + 200
    while size < target_size:  # fill with description and reviews up to this page's size
        if rng.random() < 0.35:
            part = f"<p>{text.paragraph(rng)}</p>"
            description.append(part)
        else:
            part = (f'<article class="review" itemprop="review" itemscope><h3>{esc(text.paragraph(rng, 1, 1)[:60])}</h3>'
                    f'<span itemprop="reviewRating" itemscope><span itemprop="ratingValue">{rng.randint(1, 5)}</span>/5'
                    f'</span> by <span class="author">{rng.choice(_WORDS).capitalize()}{rng.randint(1, 99)}</span> '
                    f'<time>2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}</time><p>{text.paragraph(rng, 2, 6)}</p>'
                    f'<span class="helpful">{rng.randint(0, 300)} people found this helpful</span></article>')
            reviews.append(part)
        size += len(part.encode("utf-8"))
    return (head + main + "".join(description) + tail
            + f'<section id="reviews" class="reviews"><h2>Reviews</h2>{"".join(reviews)}</section></main>' + footer)


@dataclass
class Site:
    root: Path
    products: dict[str, Product]

    def truth(self) -> dict[str, dict[str, Any]]:
        return {key: dict(p.facts) for key, p in self.products.items()}

    def write_truth(self) -> Path:
        path = self.root / "truth.json"
        path.write_text(json.dumps({k: {"path": p.path, **p.facts} for k, p in self.products.items()}, indent=1))
        return path


def _write(root: Path, product: Product, text: _Text) -> None:
    path = root / product.path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(product, text), encoding="utf-8")


def generate_site(root: Path, n: int, seed: int = 7) -> Site:
    """Write ``n`` product pages under ``root`` (readable by a server running as another user)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    text = _Text(seed)
    products = {}
    for i in range(1, n + 1):
        product = new_product(i, seed)
        products[product.key] = product
        _write(root, product, text)
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.chmod(directory, 0o755)
    site = Site(root, products)
    site.write_truth()
    return site


def mutate_site(site: Site, seed: int, round_no: int, changed: float = 0.03, touched: float = 0.05
                ) -> tuple[list[str], list[str]]:
    """Change ``changed`` of the pages (price within ±20%, stock, reviews) and rewrite ``touched`` of them
    with the same bytes (a new Last-Modified/ETag, same content). Returns (changed keys, touched keys)."""
    rng = random.Random(f"mutate:{seed}:{round_no}")
    keys = sorted(site.products)
    picked = rng.sample(keys, k=min(len(keys), max(1, round(len(keys) * changed)) + round(len(keys) * touched)))
    n_changed = max(1, round(len(keys) * changed))
    text = _Text(seed)
    for key in picked[:n_changed]:
        product = site.products[key]
        whole = _FORMAT_BY_NAME[product.price_format][3]
        factor = rng.choice([rng.uniform(0.82, 0.95), rng.uniform(1.05, 1.2)])
        product.facts["price"] = float(round(product.facts["price"] * factor)) if whole else round(
            product.facts["price"] * factor, 2)
        product.facts["review_count"] += rng.randint(1, 30)
        if rng.random() < 0.3:
            product.facts["in_stock"] = not product.facts["in_stock"]
            product.stock_text = rng.choice(_STOCK_TEXT[product.facts["in_stock"]])
    # a later mtime even on file systems with 1 s timestamps: nginx's ETag is mtime-size
    later = time.time() + 2
    for key in picked:
        product = site.products[key]
        _write(site.root, product, text)
        os.utime(site.root / product.path.lstrip("/"), (later, later))
    site.write_truth()
    return picked[:n_changed], picked[n_changed:]


# ---------------------------------------------------------------------------------------------- serving


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
{user}
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    types {{ text/html html; application/json json; }}
    default_type application/octet-stream;
    charset utf-8;
    etag on;
    if_modified_since exact;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    server {{
        listen {host}:{port};
        root {root};
        location / {{ try_files $uri =404; }}
    }}
}}
"""


class SiteServer:
    """A static server for ``root`` on 127.0.0.1, in a child process; ``kind`` is "nginx" or "python"."""

    def __init__(self, root: Path, prefer: str = "auto") -> None:
        if prefer not in ("auto", "nginx", "python"):
            raise ValueError(f"server must be auto, nginx or python, not {prefer!r}")
        self.root = Path(root).resolve()
        self.prefer = prefer
        self.port = 0
        self.kind = ""
        self.version = ""
        self.process: subprocess.Popen[bytes] | None = None
        self._work: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def __enter__(self) -> SiteServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binary = nginx_binary()
        if self.prefer == "nginx" and binary is None:
            raise RuntimeError("nginx is not installed (apt-get install -y nginx-light)")
        self.port = free_port()
        if binary and self.prefer != "python":
            self._start_nginx(binary)
        else:
            self._start_python()
        self._wait_ready()

    def _start_nginx(self, binary: str) -> None:
        self._work = tempfile.mkdtemp(prefix="sitegen-nginx-")
        conf = Path(self._work) / "nginx.conf"
        # as root, workers would run as "nobody"; keep them as the user who generated the files
        user = "user root;" if os.geteuid() == 0 else ""
        conf.write_text(NGINX_CONF.format(work=self._work, user=user, host=HOST, port=self.port, root=self.root))
        version = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
        self.version = (version.stderr or version.stdout).strip().split(":")[-1].strip()
        self.kind = "nginx"
        self.process = subprocess.Popen([binary, "-p", self._work, "-e", f"{self._work}/error.log", "-c", str(conf)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _start_python(self) -> None:
        self.kind = "python"
        self.version = f"ThreadingHTTPServer (Python {sys.version.split()[0]})"
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", str(self.root),
                                         str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"{self.kind} server exited with {self.process.returncode}: {err.strip()[-800:]}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} server did not listen on {HOST}:{self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # nginx: SIGQUIT is a graceful stop of the master and its workers; Python server: SIGTERM
            self.process.send_signal(signal.SIGQUIT if self.kind == "nginx" else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        self.process = None
        if self._work:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None


def serve_python(root: Path, port: int) -> None:
    """The fallback server: HTTP/1.1 keep-alive, ETag + Last-Modified, 304 on either validator."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    base = Path(root).resolve()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms delayed-ACK stalls

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._respond(send_body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._respond(send_body=False)

        def _respond(self, send_body: bool) -> None:
            path = (base / urllib.parse.unquote(self.path.split("?", 1)[0]).lstrip("/")).resolve()
            if base not in path.parents or not path.is_file():
                self._send(404, b"not found", {"Content-Type": "text/plain"}, send_body)
                return
            stat = path.stat()
            etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
            last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
            validators = {"ETag": etag, "Last-Modified": last_modified}
            if_none_match = self.headers.get("If-None-Match")
            if_modified_since = self.headers.get("If-Modified-Since")
            if if_none_match is not None:
                if etag in [t.strip() for t in if_none_match.split(",")] or if_none_match.strip() == "*":
                    self._send(304, b"", validators, False)
                    return
            elif if_modified_since is not None:
                try:
                    since = email.utils.parsedate_to_datetime(if_modified_since).timestamp()
                except (TypeError, ValueError):
                    since = None
                if since is not None and int(stat.st_mtime) <= since:
                    self._send(304, b"", validators, False)
                    return
            kind = "text/html; charset=utf-8" if path.suffix == ".html" else "application/octet-stream"
            self._send(200, path.read_bytes(), {"Content-Type": kind, **validators}, send_body)

        def _send(self, status: int, body: bytes, headers: dict[str, str], send_body: bool) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if status != 304:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body and status != 304:
                self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server((HOST, port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve_python(Path(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "generate":
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
        generated = generate_site(Path(sys.argv[2]), n)
        print(f"{len(generated.products)} pages in {generated.root}")
    else:
        sys.exit("usage: sitegen.py serve ROOT PORT | sitegen.py generate ROOT [N]")
