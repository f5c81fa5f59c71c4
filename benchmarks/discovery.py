"""Discovery at scale: a sitemap index of two gzip sitemaps listing N product URLs, read by
``scrape-contracts targets discover`` as a user types it, on a fresh instance.

Run from the repo root (venv active)::

    python benchmarks/discovery.py --urls 20000              # SQLite store and instance
    python benchmarks/discovery.py --urls 20000 --postgres   # the store on a throw-away PostgreSQL database

It prints the wall-clock seconds of the first run (every URL new: recorded in the store and added as a
partition) and of a second run on the unchanged sitemaps, each the whole command (Python's start included),
and the load average before and after.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("SCRAPE_CONTRACTS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def sitemaps(base: str, urls: int) -> dict[str, tuple[bytes, str]]:
    half = urls // 2

    def urlset(numbers: range) -> bytes:
        entries = "".join(f"<url><loc>{base}/p/{i}</loc><lastmod>2026-05-01</lastmod></url>" for i in numbers)
        return gzip.compress(f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
                             .encode())

    index = "".join(f"<sitemap><loc>{base}/s{n}.xml.gz</loc></sitemap>" for n in (1, 2))
    return {"/index.xml": (f"<sitemapindex>{index}</sitemapindex>".encode(), "application/xml"),
            "/s1.xml.gz": (urlset(range(half)), "application/x-gzip"),
            "/s2.xml.gz": (urlset(range(half, urls)), "application/x-gzip")}


def serve(files: dict[str, tuple[bytes, str]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body, kind = files.get(self.path, (b"not found", "text/plain"))
            self.send_response(200 if self.path in files else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=20_000)
    parser.add_argument("--postgres", action="store_true", help="the project store on PostgreSQL")
    args = parser.parse_args()
    files: dict[str, tuple[bytes, str]] = {}
    server = serve(files)  # the handler reads the dict, filled once the server's port is known
    base = f"http://127.0.0.1:{server.server_address[1]}"
    files.update(sitemaps(base, args.urls))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "contracts").mkdir()
        (folder / "contracts" / "shop.yaml").write_text(
            "name: shop\nfetch: {allow_private_addresses: true}\nfields: {title: {selector: h1}}\n"
            f"discover:\n  sitemaps: ['{base}/index.xml']\n  max_targets: {max(args.urls, 1)}\n")
        home = folder / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry: {enabled: false}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "SCRAPE_CONTRACTS_"))}
        env["DAGSTER_HOME"] = str(home)
        database = None
        if args.postgres:
            import sqlalchemy as sa

            database = f"sc_bench_{uuid.uuid4().hex[:8]}"
            admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
            env["SCRAPE_CONTRACTS_DB_URL"] = PG_ADMIN.rsplit("/", 1)[0] + f"/{database}"
        command = [str(Path(sys.executable).parent / "scrape-contracts"), "--contracts-dir",
                   str(folder / "contracts"), "targets", "discover", "shop"]
        try:
            print(f"{args.urls} URLs, store on {'PostgreSQL' if args.postgres else 'SQLite'}; "
                  f"load average {os.getloadavg()[0]:.2f}")
            for label in ("first run", "unchanged"):
                started = time.monotonic()
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
                seconds = time.monotonic() - started
                assert done.returncode == 0, done.stdout + done.stderr
                print(f"{label:10} {seconds:7.1f} s  {done.stdout.strip().splitlines()[-1]}")
            print(f"load average after {os.getloadavg()[0]:.2f}")
        finally:
            server.shutdown()
            if database is not None:
                with admin.connect() as conn:
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
                admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
