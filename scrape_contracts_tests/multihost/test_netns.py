"""The harness on its own: hosts that reach PostgreSQL and RabbitMQ over the bridge, a site served from its
own namespace that sees which host asked, and nothing left behind, after a failure and after a killed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scrape_contracts.testing import netns
from scrape_contracts.testing.hosts_site import HostPlan, HostsSite
from scrape_contracts_tests.conftest import PG_ADMIN_URL, require_postgres
from scrape_contracts_tests.multihost.conftest import require_netns

# what each host runs: a page of the site, a query through the forwarded PostgreSQL, and the AMQP
# handshake through the forwarded RabbitMQ (the broker answers the protocol header with Connection.Start,
# a method frame: type 1, channel 0, class 10 method 10)
PROBE = textwrap.dedent("""
    import socket, struct, sys, urllib.request
    import psycopg2
    url, db, gateway = sys.argv[1:4]
    print(urllib.request.urlopen(url, timeout=10).read().decode())
    with psycopg2.connect(db, connect_timeout=10) as conn, conn.cursor() as cur:
        cur.execute("select inet_client_addr() is not null, current_database()")
        print(cur.fetchone()[1])
    with socket.create_connection((gateway, 5672), timeout=10) as s:
        s.sendall(b"AMQP\\x00\\x00\\x09\\x01")
        head = s.recv(11)
        kind, channel, _size, cls, method = struct.unpack(">BHIHH", head)
        print("amqp", kind, channel, cls, method)
""")


def test_each_host_reaches_the_site_the_database_and_the_broker(cluster: netns.Cluster) -> None:
    require_postgres()
    plans = {address: HostPlan(page=lambda path, a=address: f"<p>{a}{path}</p>")
             for address in cluster.site_addresses}
    with HostsSite(plans, enter=lambda: netns.enter(cluster.site_netns)) as site:
        for name, host in cluster.hosts.items():
            address = cluster.site_addresses[len(name) % len(cluster.site_addresses)]
            done = cluster.run(name, [sys.executable, "-c", PROBE, site.url(address, f"/p/{name}"),
                                      cluster.database_url(PG_ADMIN_URL, name), cluster.gateway])
            assert done.returncode == 0, done.stderr
            assert done.stdout.split("\n")[:3] == [f"<p>{address}/p/{name}</p>", "postgres", "amqp 1 0 10 10"]
            seen = [(s.path, s.client) for s in site.requests(address, f"/p/{name}")]
            assert seen == [(f"/p/{name}", host.address)]
            # its own folders, empty
            assert sorted(p.name for p in host.home.iterdir()) == ["dagster_home", "tmp"]
            assert not any((host.home / "dagster_home").iterdir())
    # the site's addresses exist only in the site's namespace: this process (the root namespace) cannot
    # bind them
    with pytest.raises(RuntimeError, match="cannot assign requested address"):
        HostsSite({cluster.site_addresses[0]: HostPlan()})


def test_each_host_has_its_own_folder_at_the_same_path(cluster: netns.Cluster) -> None:
    for name in cluster.hosts:
        done = cluster.run(name, ["sh", "-c", f'ls -A "$DAGSTER_HOME"; echo {name} > "$HOME/mark"'])
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""  # nothing in its DAGSTER_HOME before
    for name, host in cluster.hosts.items():
        assert (host.home / "mark").read_text() == f"{name}\n"
        done = cluster.run(name, ["cat", f"{netns.HOST_DIR}/mark"])
        assert done.stdout == f"{name}\n"  # the same path, its own folder
    assert not any(Path(netns.HOST_DIR).iterdir())  # this process's view: nothing of theirs


def test_a_host_is_stopped_and_killed_by_its_processes(cluster: netns.Cluster) -> None:
    sleeper = cluster.start("b", ["sleep", "600"], cluster.environment("b"))
    # once its shell has bound the host's folder (a `mount` child for a moment) and exec'd the command:
    # "alone on b" alone is true also before the shell forks `mount`, which then shows up in the signal
    netns.wait_until("the sleeper exec'd and alone on b",
                     lambda: _command(sleeper.pid) == "sleep" and cluster.pids("b") == [sleeper.pid],
                     timeout=10)
    assert cluster.pids("a") == []
    assert cluster.signal("b", signal.SIGSTOP) == [sleeper.pid]
    netns.wait_until("the sleeper stopped", lambda: netns.stopped(sleeper.pid), timeout=10)
    cluster.signal("b", signal.SIGKILL)
    assert sleeper.wait(10) == -signal.SIGKILL


def test_a_failure_inside_leaves_nothing_behind(tmp_path: Path) -> None:
    require_netns()
    with pytest.raises(RuntimeError, match="the test failed"):
        with netns.cluster(tmp_path) as made:
            sleeper = made.start("a", ["sleep", "600"], made.environment("a"))
            raise RuntimeError("the test failed")
    assert netns.leftovers(made.prefix) == []
    assert sleeper.poll() == -signal.SIGKILL


def test_what_a_killed_run_left_is_removed_by_the_next(tmp_path: Path) -> None:
    require_netns()
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, sys, time
        from scrape_contracts.testing import netns
        with netns.cluster(pathlib.Path({str(tmp_path / 'killed')!r})) as made:
            made.start("a", ["sleep", "600"], made.environment("a"))
            print(made.prefix, flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert owner.stdout is not None
    prefix = owner.stdout.readline().strip()
    assert netns.leftovers(prefix) != []
    os.kill(owner.pid, signal.SIGKILL)  # no finally runs: its namespaces, bridge and sleeper stay
    owner.wait(10)
    assert netns.leftovers(prefix) != []
    with netns.cluster(tmp_path / "next") as made:
        assert netns.leftovers(prefix) == []
        assert made.prefix != prefix


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""
