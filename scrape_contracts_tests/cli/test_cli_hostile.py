"""The CLI under hostile input and faults (issue 28): escaped output, one-line errors when a database is
down, the token kept off the command line, the MCP server's Host/Origin checks, batches that failed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scrape_contracts.cli import main
from scrape_contracts_tests.api.servers import free_port
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.planted import plant_yaml

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def test_events_print_control_characters_escaped(sqlite_harness: Harness, capsys) -> None:
    sqlite_harness.write_product_contract("shop", {"p1": "http://127.0.0.1:9/p1"})
    folder = ["--contracts-dir", str(sqlite_harness.contracts_dir)]
    reason = "\x1b[2J\x1b[31mall clear\r\x00"  # would clear the screen and recolour the rest
    assert main([*folder, "pause", "shop", "p1", "--reason", reason]) == 0
    capsys.readouterr()
    for argv in (["events", "shop"], ["targets", "list", "shop"]):
        assert main([*folder, *argv]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x00" not in out and "\r" not in out, argv
        assert "\\x1b[2J\\x1b[31mall clear\\r\\x00" in out, (argv, out)


@pytest.mark.slow
def test_a_stopped_instance_database_is_one_line(tmp_path: Path) -> None:
    """PostgreSQL down: `run` printed a traceback from dagster_postgres (and a warning per retry)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(  # nothing listens on the port: what a stopped server looks like
        f"storage:\n  postgres:\n    postgres_url: postgresql://postgres@127.0.0.1:{free_port()}/gone\n"
        "telemetry: {enabled: false}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "SCRAPE_CONTRACTS_"))}
    done = subprocess.run([str(BIN / "scrape-contracts"), "--contracts-dir", str(REPO / "contracts"), "run", "books",
                           "--idempotency-key", "k"], env={**env, "DAGSTER_HOME": str(home)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("error: cannot use the Dagster instance's storage") and str(home) in done.stderr
    assert "Connection refused" in done.stderr


def test_mcp_token_comes_from_a_file_or_the_environment_never_an_argument(tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    from scrape_contracts.cli.serve import stdio_token

    with pytest.raises(SystemExit) as refused:
        main(["mcp", "--token", "sct_abc_secret"])
    assert refused.value.code == 2 and "sct_abc_secret" not in capsys.readouterr().err
    monkeypatch.delenv("SCRAPE_CONTRACTS_TOKEN", raising=False)
    for content, says in ((None, "cannot read it"), ("", "must hold one API token"),
                          ("sct_a_b\nsct_c_d", "must hold one API token")):
        path = tmp_path / "token"
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_text(content)
        assert main(["mcp", "--token-file", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err and "sct_" not in err, err
    path.write_text("sct_abc_secret\n")
    assert stdio_token(path) == "sct_abc_secret"
    monkeypatch.setenv("SCRAPE_CONTRACTS_TOKEN", "sct_from_env")
    assert stdio_token(None) == "sct_from_env"


def test_mcp_http_checks_host_and_origin_always(sqlite_harness: Harness, capsys) -> None:
    from scrape_contracts.api.mcp import transport_security

    # beyond loopback: refused before listening unless the Host clients send is named
    assert main(["mcp", "--transport", "http", "--host", "0.0.0.0", "--port", "8001"]) == 2
    assert "needs --allowed-host NAME:PORT" in capsys.readouterr().err
    named = transport_security("10.0.0.5", 8001, ["mcp.internal:8001"], ["https://agents.internal"])
    assert named.enable_dns_rebinding_protection and named.allowed_hosts == ["mcp.internal:8001"]
    assert named.allowed_origins == ["https://agents.internal"]

    port = free_port()
    server = subprocess.Popen([str(BIN / "scrape-contracts"), "--contracts-dir", str(sqlite_harness.contracts_dir),
                               "mcp", "--transport", "http", "--port", str(port)], env=dict(os.environ),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Accept": "application/json, text/event-stream"}
        assert httpx.post(url, json=body, headers={**headers, "Host": "rebound.example:80"}).status_code == 421
        assert httpx.post(url, json=body, headers={**headers, "Origin": "http://evil.example"}).status_code == 403
        assert httpx.post(url, json=body, headers=headers).status_code == 401  # past the checks: the token's turn
        assert httpx.post(url, content=b"x" * (5 * 1024 * 1024),
                          headers={**headers, "Content-Type": "application/json"}).status_code == 413
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_serving_beyond_loopback_warns_about_tls() -> None:
    from scrape_contracts.api.serving import bind_warning

    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert bind_warning(host, "serve") is None, host
    for host in ("0.0.0.0", "::", "10.0.0.5", "api.internal"):
        warning = bind_warning(host, "serve")
        assert warning and "TLS" in warning and "docs/api.md" in warning, host


def test_serve_refuses_large_headers_and_bodies(sqlite_harness: Harness) -> None:
    """The real `serve` process: 100 KB of headers (accepted by uvicorn's default parser) and an unread
    100 MB body, both without a token."""
    from scrape_contracts_tests.api.servers import ApiServer

    sqlite_harness.write_product_contract("shop", {"p1": "http://127.0.0.1:9/p1"})
    with ApiServer(sqlite_harness.backend.home, sqlite_harness.contracts_dir) as api:
        big = httpx.get(f"{api.url}/contracts", headers={"X-Padding": "a" * 100_000})
        # 400 from the parser when the headers arrive in pieces, 431 when they arrive whole
        assert big.status_code in (400, 431)
        with socket.create_connection(("127.0.0.1", api.port), timeout=20) as sock:
            sock.sendall(f"POST /contracts/shop/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: k\r\n"
                         "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
        assert httpx.get(f"{api.url}/health/live").status_code == 200


def test_a_batch_whose_targets_failed_exits_1_and_says_so(sqlite_harness: Harness, site, capsys) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$10.00"))
    urls = {"ok": site.url("/p/1"), "gone1": site.url("/missing/1"), "gone2": site.url("/missing/2")}
    sqlite_harness.write_product_contract("shop", urls)
    code = main(["--contracts-dir", str(sqlite_harness.contracts_dir), "run", "shop", "--idempotency-key", "k"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.count("2 target(s) failed") == 1, out


@pytest.fixture
def full_disk(tmp_path: Path) -> Path:
    """A real file system with no space left: a tmpfs, filled (needs root to mount; skipped otherwise)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()[:200]}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: full
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_for_pages_is_said_once(sqlite_harness: Harness, site, full_disk: Path, capsys,
                                            monkeypatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(full_disk))
    urls = {}
    for i in range(6):
        site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", "$10.00"))
        urls[f"p{i}"] = site.url(f"/p/{i}")
    sqlite_harness.write_product_contract("shop", urls)
    code = main(["--contracts-dir", str(sqlite_harness.contracts_dir), "run", "shop", "--idempotency-key", "k"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.count("6 target(s) failed") == 1 and out.lower().count("no space left on the device") == 1, out


def test_dev_starts_nothing_that_imports_from_the_folder_it_is_run_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Dagster starts its webserver, daemon, code servers and run workers as `python -m ...`, which puts the
    # working folder first on sys.path; the home-made daemon's warm process imported a module planted in the
    # folder it was started from. `dev` starts Dagster in DAGSTER_HOME instead of where it is run
    home, elsewhere = tmp_path / "home", tmp_path / "shared"
    home.mkdir()
    elsewhere.mkdir()
    (home / "scrape_contracts.db").touch()  # an instance something was scraped into
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(elsewhere)
    started: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: started.append((path, argv, env)))
    monkeypatch.setattr(os, "chdir", lambda path: started.append(("chdir", [str(path)], {})))
    assert main(["dev"]) == 0
    [(chdir, [folder], _), (_, argv, env)] = started
    assert chdir == "chdir" and Path(folder) == home and argv[1] == "dev"
    marker = plant_yaml(elsewhere)
    # a process as Dagster starts its own, with dev's environment: in dev's folder, and (to show the plant
    # works) in the folder dev was run from
    for where, imported in ((home, []), (elsewhere, ["-m --version"])):
        subprocess.run([sys.executable, "-m", "dagster", "--version"], cwd=where, check=True, timeout=120,
                       env={**env, "PLANT_MARKER": str(marker)}, capture_output=True)
        assert (marker.read_text().splitlines() if marker.exists() else []) == imported, where


def test_a_target_url_over_2048_characters_is_refused_in_contracts_and_by_targets_add(sqlite_harness: Harness,
                                                                                      capsys) -> None:
    # a 10 MB URL was accepted: stored, keyed and shown in run history
    from scrape_contracts.contract.loader import load_contracts

    harness = sqlite_harness
    huge = "https://shop.example/" + "a" * 10_000_000
    harness.write_product_contract("dyn", dynamic=True)
    folder = ["--contracts-dir", str(harness.contracts_dir)]
    assert main([*folder, "targets", "add", "dyn", huge]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 400, err[:400]
    assert "10000021 characters long, more than 2048" in err
    assert harness.store.list_targets("dyn") == {}
    assert main([*folder, "targets", "add", "dyn", "https://shop.example/" + "b" * 2000]) == 0  # under it
    harness.write_product_contract("static", {"p1": "https://shop.example/" + "c" * 3000})
    [error] = [e for e in load_contracts(harness.contracts_dir).errors if e.file.endswith("static.yaml")]
    assert "more than 2048" in str(error) and len(str(error)) < 400, str(error)[:400]
