"""Several hosts on one Linux machine, made with network namespaces: worker hosts, a site host, and the
database and the broker reached over the network, as on a cluster.

``with cluster(tmp) as c:`` makes, under a prefix unique to the run (``scn`` + the owner's pid + a counter),
one bridge in the root namespace with an address of the subnet ``10.213.X.0/24`` no other interface uses,
and one namespace per worker host (``a``, ``b``, ``c``) and one for the site, each joined to the bridge by a
veth pair, its loopback up. The worker hosts talk to each other and to the site over the bridge, so nothing
is routed and no sysctl of the machine changes.

PostgreSQL and RabbitMQ listen on 127.0.0.1 only and stay as they are: a forwarding process per port in
the root namespace listens on the bridge's address (``c.gateway``) and relays to 127.0.0.1, so a worker host
reaches "the database at 10.213.X.1:5432" as it would a database server, and ``c.cut(5672)`` /
``c.restore(5672)`` take the broker (or the database) away from the worker hosts and give it back. Each worker host has its own
empty folder (``c.hosts["a"].home``), which its processes see at one path, the same on every host
(``HOST_DIR``: their HOME, TMPDIR and DAGSTER_HOME), each in a mount namespace of its own as on separate
machines: a path one host's Dagster instance hands another (a run's instance reference names its
DAGSTER_HOME) is that host's own folder there, never the first one's. Nothing is shared but the database,
the broker and the code. ``c.hosts["control"]`` is the machine of the daemon and the run workers: the root
network namespace (the database on 127.0.0.1), its folder isolated the same way.
``c.start("a", [...], env)`` starts a process inside host a (``ip netns exec``
execs the command, so the pid is the process's own); ``c.signal("a", SIGSTOP)`` signals every process in
the host (a frozen or killed machine, its children included).

Everything is removed on exit, on failure too, and a namespace or link left by a run whose owner is gone
(a killed test) is removed before the next one starts. Needs root and ``ip`` (iproute2).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrape_contracts.testing import forward

FAMILY = "scn"  # every name this module makes starts with it; then the owner's pid (6 hex digits), a counter
SUBNETS = "10.213.{}.0/24"  # X in 1..254: the first one no interface of the machine is on
WORKER_OFFSET = 11  # host a is .11, b .12, ...
SITE_OFFSET = 101  # the site's addresses: .101, .102, ...
FORWARDED_PORTS = (5432, 5672)  # PostgreSQL, RabbitMQ
CONTROL = "control"
HOST_DIR = "/run/scrape_contracts_host"  # where every host's processes see their own folder
_LOCK = Path("/run/scrape_contracts_netns.lock")  # the choice of a subnet and the names, one run at a time
_CLONE_NEWNET = 0x40000000
_counter = 0


class NetnsUnavailable(RuntimeError):
    """This machine cannot make namespaces here (not root, or no ``ip``); the message says which."""


def unavailable_reason() -> str | None:
    """Why hosts cannot be made here, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if ip_command() is None:
        return "no `ip` command (apt-get install iproute2)"
    return None


def ip_command() -> str | None:
    found = shutil.which("ip")
    return found or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.access(p, os.X_OK)), None)


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run([ip_command() or "ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def enter(netns: str) -> None:
    """Move the calling thread (only it: Linux keeps the network namespace per thread) into ``netns``;
    sockets it makes afterwards live there. For a server thread such as ``HostsSite(..., enter=...)``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Host:
    name: str  # "a", or CONTROL
    netns: str | None  # None: the root namespace
    address: str
    home: Path  # its own folder (HOST_DIR inside), empty at the start

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on this host: in its network namespace, its own folder at HOST_DIR (``ip netns
        exec`` gives the command a mount namespace of its own; the control host asks ``unshare`` for one)."""
        bind = ["sh", "-c", f'mount --bind "$0" {HOST_DIR} && exec "$@"', str(self.home), *argv]
        if self.netns is None:
            return ["unshare", "--mount", "--propagation", "private", *bind]
        return [ip_command() or "ip", "netns", "exec", self.netns, *bind]


@dataclass
class Cluster:
    prefix: str
    gateway: str  # the root namespace's address on the bridge, where the forwarders listen
    hosts: dict[str, Host]
    site_netns: str
    site_addresses: list[str]
    processes: list[subprocess.Popen] = field(default_factory=list)
    forwarders: dict[int, subprocess.Popen] = field(default_factory=dict)  # port → its relay

    def cut(self, port: int) -> None:
        """The worker hosts lose the server at ``port`` (5432: the database, 5672: the broker): its relay
        ends, so their connections are reset and new ones refused, as when that server goes away; the
        control host (127.0.0.1) keeps it. ``restore(port)`` brings it back."""
        relay = self.forwarders.pop(port)
        relay.kill()
        relay.wait(10)

    def restore(self, port: int) -> None:
        self.forwarders[port] = _forward(self.gateway, port)

    @property
    def workers(self) -> list[str]:
        return [name for name in self.hosts if name != CONTROL]

    def database_url(self, url: str, host: str = "a") -> str:
        """``url`` (a PostgreSQL URL on 127.0.0.1 or localhost) as ``host`` reaches it."""
        if host == CONTROL:
            return url
        return re.sub(r"@(127\.0\.0\.1|localhost)(?=[:/])", f"@{self.gateway}", url, count=1)

    def broker_url(self, host: str = "a", user: str = "guest", password: str = "guest") -> str:
        return f"pyamqp://{user}:{password}@{'127.0.0.1' if host == CONTROL else self.gateway}:5672//"

    def environment(self, host: str, **extra: str) -> dict[str, str]:
        """A clean environment for a process on ``host``: its own HOME, TMPDIR and DAGSTER_HOME, the
        interpreter's PATH, nothing of this process's SCRAPE_CONTRACTS_* or DAGSTER_* settings."""
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("SCRAPE_CONTRACTS_", "DAGSTER_", "PYTEST_", "CELERY_"))}
        env = {**keep, "HOME": HOST_DIR, "TMPDIR": f"{HOST_DIR}/tmp",
               "DAGSTER_HOME": f"{HOST_DIR}/dagster_home", "PYTHONUNBUFFERED": "1"}
        env.update(extra)
        return env

    def start(self, host: str, argv: Sequence[str], env: dict[str, str], *, log: Path | None = None,
              cwd: Path | None = None) -> subprocess.Popen:
        """A process inside ``host`` (its output to ``log``); stopped with the cluster if still running."""
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
        try:
            process = subprocess.Popen(self.hosts[host].command(argv),
                                       env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if log is not None:
                out.close()
        self.processes.append(process)
        return process

    def run(self, host: str, argv: Sequence[str], env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.hosts[host].command(argv),
                              env=env or self.environment(host), capture_output=True, text=True,
                              timeout=timeout)

    def pids(self, host: str) -> list[int]:
        netns = self.hosts[host].netns
        if netns is None:
            raise ValueError("the control host is the root namespace: signal its processes one by one")
        return _pids(netns)

    def signal(self, host: str, sig: int) -> list[int]:
        """Send ``sig`` to every process in ``host`` (a machine frozen, revived or switched off)."""
        pids = self.pids(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids


def wait_until(what: str, condition: Callable[[], Any], timeout: float = 60.0, every: float = 0.05) -> Any:
    """``condition()``'s first true value; ``TimeoutError`` naming ``what`` after ``timeout`` seconds (a
    bound for a broken run, not a timing: the tests wait on what happened, never on how long it takes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(every)


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP took effect)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (FileNotFoundError, IndexError):
        return False


def _forward(gateway: str, port: int) -> subprocess.Popen:
    """A relay from ``gateway:port`` to 127.0.0.1 (one process per port, so one server can be cut)."""
    return forward.start(f"{gateway}:{port}", f"127.0.0.1:{port}")


def _pids(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in out.split()]


def owner_alive(name: str) -> bool:
    match = re.match(rf"{FAMILY}([0-9a-f]{{6}})", name)
    if match is None:
        return True  # not ours
    pid = int(match.group(1), 16)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ours() -> tuple[list[str], list[str]]:
    """(namespaces, root-side links) whose names this module made."""
    spaces = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.startswith(FAMILY)]
    links = [line.split()[0].split("@")[0] for line in _ip("-br", "link").splitlines()
             if line.startswith(FAMILY)]
    return spaces, links


def _remove(prefix_or_names: Sequence[str], spaces: Sequence[str], links: Sequence[str]) -> None:
    for space in spaces:
        if not space.startswith(tuple(prefix_or_names)):
            continue
        for _ in range(50):  # a namespace lives on while a process is in it: end them first
            pids = _pids(space)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        _ip("netns", "delete", space, check=False)
    for link in links:
        if link.startswith(tuple(prefix_or_names)):
            _ip("link", "delete", link, check=False)


def clean_stale() -> list[str]:
    """Remove what runs whose owner process is gone left behind; the names removed."""
    spaces, links = _ours()
    stale = sorted({n[: len(FAMILY) + 7] for n in [*spaces, *links] if not owner_alive(n)})
    if stale:
        _remove(stale, spaces, links)
    return stale


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links whose name starts with ``prefix`` (none after a cluster has exited)."""
    spaces, links = _ours()
    return [n for n in [*spaces, *links] if n.startswith(prefix)]


def _free_subnet() -> ipaddress.IPv4Network:
    used = [ipaddress.ip_interface(word) for line in _ip("-o", "-4", "addr").splitlines()
            for word in line.split() if re.fullmatch(r"\d+\.\d+\.\d+\.\d+/\d+", word)]
    routes = [ipaddress.ip_network(line.split()[0], strict=False) for line in _ip("-4", "route").splitlines()
              if re.match(r"\d+\.\d+\.\d+\.\d+(/\d+)?\s", line)]
    for x in range(1, 255):
        net = ipaddress.ip_network(SUBNETS.format(x))
        if not any(i.network.overlaps(net) for i in used) and not any(r.overlaps(net) for r in routes):
            return net
    raise RuntimeError("no free subnet in 10.213.0.0/16 for the hosts")


@contextlib.contextmanager
def cluster(root: Path, workers: Sequence[str] = ("a", "b", "c"), site_hosts: int = 4) -> Iterator[Cluster]:
    """Worker hosts ``workers`` and a site namespace with ``site_hosts`` addresses, their folders under
    ``root``; all removed on exit. ``NetnsUnavailable`` when this machine cannot make them."""
    global _counter
    reason = unavailable_reason()
    if reason is not None:
        raise NetnsUnavailable(reason)
    _counter += 1
    prefix = f"{FAMILY}{os.getpid():06x}{_counter % 10}"
    made: Cluster | None = None
    try:
        with open(_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            clean_stale()
            _remove([prefix], *_ours())  # a counter wrapped round in a long-lived process
            net = _free_subnet()
            addresses = list(net.hosts())
            gateway = str(addresses[0])
            bridge = f"{prefix}br"
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{gateway}/{net.prefixlen}", "dev", bridge)
            _ip("link", "set", bridge, "up")

            def namespace(suffix: str, ips: Sequence[str]) -> str:
                name, outer, inner = f"{prefix}{suffix}", f"{prefix}{suffix}", f"{prefix}{suffix}p"
                _ip("netns", "add", name)
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", outer, "master", bridge, "up")
                _ip("link", "set", inner, "netns", name)
                for ip in ips:
                    _ip("-n", name, "addr", "add", f"{ip}/{net.prefixlen}", "dev", inner)
                _ip("-n", name, "link", "set", inner, "up")
                return name

            Path(HOST_DIR).mkdir(exist_ok=True)
            hosts = {}
            for i, worker in enumerate([*workers, CONTROL]):
                home = root / f"host-{worker}"
                for sub in ("", "tmp", "dagster_home"):
                    (home / sub).mkdir(parents=True, exist_ok=True)
                if worker == CONTROL:
                    hosts[worker] = Host(worker, None, gateway, home)
                    continue
                address = str(addresses[WORKER_OFFSET - 1 + i])
                hosts[worker] = Host(worker, namespace(f"w{worker}", [address]), address, home)
            site = [str(addresses[SITE_OFFSET - 1 + i]) for i in range(site_hosts)]
            made = Cluster(prefix, gateway, hosts, namespace("s", site), site)
        for port in FORWARDED_PORTS:
            made.restore(port)
        yield made
    finally:
        if made is not None:
            for process in made.processes:
                if process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
            for relay in made.forwarders.values():
                relay.kill()
                relay.wait(10)
        _remove([prefix], *_ours())
