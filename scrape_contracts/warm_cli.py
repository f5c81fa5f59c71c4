"""``scrape-contracts run`` served by the warm process: the command without Python's start and Dagster's import.

A ``run`` command spends most of its own time before it creates a run: importing Dagster and this package,
opening the instance, loading the contracts and the code location (2.5 s of an unchanged 2,000-page sweep's
6.9 s on this machine; the scraping itself took 2.4 s). The warm process that run workers fork from
(``scrape_contracts/warm_worker.py``, started by the daemon's launcher) has all of that loaded, so it also
listens on a Unix socket; ``scrape-contracts run`` and ``reextract`` connect to it first and, when it
answers, it forks a child that executes the very same command line:

- the client sends its arguments, environment and working directory, and its own stdin, stdout and stderr
  as file descriptors (SCM_RIGHTS): the child prints straight to the user's terminal or pipe;
- the child replaces its environment with the client's, changes to its directory and runs ``cli.main``; the
  code location it reuses is the one the warm process loaded only while the contracts folder still matches
  it (the same check as for runs, see ``launch._in_process_target``), else it loads the contracts itself;
- the exit status comes back over the socket; Ctrl-C in the client interrupts the child the same way.

Only the same user can connect (the socket's folder is private and the child checks the peer's uid); the
socket is keyed by DAGSTER_HOME and the Python environment, so a command only ever reaches a warm process
of the same instance and the same installed code. A warm process whose package source changed since it
started refuses, and anything that goes wrong before the child accepts (no daemon, a stale socket, another
platform) makes the command run in its own process exactly as before. ``SCRAPE_CONTRACTS_WARM_CLI=0``
turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Callable, Sequence

SERVED = frozenset({"run", "reextract"})
_ACCEPT_TIMEOUT_S = 10.0  # fork + checks take milliseconds; a very busy machine gets slack, then we run locally
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    return os.environ.get("SCRAPE_CONTRACTS_WARM_CLI", "1").strip().lower() not in ("0", "false", "no") \
        and sys.platform.startswith("linux") and hasattr(socket, "send_fds")


def socket_path(home: str, prefix: str | None = None) -> str:
    """The socket of the warm process for ``home`` (DAGSTER_HOME) and this Python environment.

    In a folder of its own under /tmp, not in DAGSTER_HOME: a Unix socket's path is limited to 107 bytes.
    """
    key = f"{os.path.realpath(home)}\0{os.path.realpath(prefix or sys.prefix)}"
    return os.path.join(_folder(), f"warm-cli-{hashlib.sha256(key.encode()).hexdigest()[:24]}.sock")


def _folder() -> str:
    return f"/tmp/scrape-contracts-{os.getuid()}"


def _private_folder(create: bool) -> bool:
    """Whether the sockets' folder exists (or was made) owned by this user and closed to everyone else."""
    folder = _folder()
    if create:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand of a ``scrape-contracts`` command line (after the global ``--contracts-dir``)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--contracts-dir":
            skip = True
        elif token.startswith("-"):
            if not token.startswith("--contracts-dir="):
                return None  # --help and the like: answered here
        else:
            return token
    return None


# ---- the client: scrape-contracts run ---------------------------------------------------------------------
def try_warm(argv: Sequence[str]) -> int | None:
    """Have the warm process execute this command; its exit status, or None to run it here instead."""
    home = os.environ.get("DAGSTER_HOME")
    if not home or command_of(argv) not in SERVED or not enabled() or not _private_folder(create=False):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(_ACCEPT_TIMEOUT_S)
        conn.connect(socket_path(home))
        payload = json.dumps({"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
        reader = conn.makefile("rb")
        answer = json.loads(reader.readline() or b"{}")
        if not answer.get("served"):
            return None  # refused (its code is older than ours, say) or gone: run it here
        # the child starts only on this word: had we given up waiting (and run the command here), it would
        # see the connection closed instead, and do nothing
        conn.sendall(b"go\n")
    except (OSError, ValueError):
        conn.close()
        return None  # no warm process (no daemon yet), a stale socket, a closed stdout: run it here
    # from here on the command is the child's: wait for its exit status however long the command takes
    conn.settimeout(None)
    interrupts = 0
    while True:
        try:
            line = reader.readline()
            break
        except KeyboardInterrupt:
            interrupts += 1
            if interrupts > 1:
                return 130  # a second Ctrl-C: stop waiting (the child is interrupted already)
            try:
                conn.sendall(b"interrupt\n")  # the child gets its own KeyboardInterrupt, like a local command
            except OSError:
                return 130
    conn.close()
    try:
        return int(json.loads(line)["exit"])
    except (ValueError, KeyError, TypeError):
        print("error: the warm process ended this command without an exit status (killed?); run it again "
              "(the same --idempotency-key launches nothing twice)", file=sys.stderr)
        return 1


# ---- the server: in the warm process ----------------------------------------------------------------------
class Listener:
    """The warm process's listening socket (non-blocking; the warm process selects on it beside stdin)."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self._inode = os.stat(path).st_ino

    @classmethod
    def open(cls) -> Listener | None:
        """Listen for this DAGSTER_HOME and Python environment; None when that cannot or should not be done
        (off, no DAGSTER_HOME, another warm process already listens there)."""
        home = os.environ.get("DAGSTER_HOME")
        if not home or not enabled() or not _private_folder(create=True):
            return None
        path = socket_path(home)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(path)
            return None  # a live warm process of another daemon on the same instance serves already
        except OSError:
            pass  # nobody there: a socket left behind by a killed process is replaced
        finally:
            probe.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(64)
            sock.setblocking(False)
            return cls(sock, path)
        except OSError:
            sock.close()
            return None

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> socket.socket | None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return None
        conn.setblocking(True)
        return conn

    def close(self) -> None:
        """Stop listening; the socket file goes only if it is still this one (not a newer warm process's)."""
        self.sock.close()
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass


def serve(conn: socket.socket, refusal: Callable[[], str | None], prepare: Callable[[], None],
          run: Callable[[list[str]], int]) -> None:
    """In a child forked for one connection: check, take over the client's streams and environment, run the
    command with ``run(argv)``, answer the exit status. Never returns.

    ``refusal()`` says why this process must not serve (its code changed since it started), ``prepare()``
    runs once the child has the client's environment and directory.
    """
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command's own subprocesses must be waitable
        signal.signal(signal.SIGINT, signal.default_int_handler)
        uid = _peer_uid(conn)
        if uid != os.getuid():
            os._exit(1)
        header, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
        if len(header) != _HEADER.size or len(fds) != 3:
            os._exit(1)
        (size,) = _HEADER.unpack(header)
        request = json.loads(_read_exactly(conn, size))
        why = refusal()
        if command_of(request["argv"]) not in SERVED:
            why = "not a command this process serves"
        elif request["env"].get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
            why = "another PYTHONPATH: modules could resolve differently here"
        if why:
            conn.sendall(json.dumps({"served": False, "why": why}).encode() + b"\n")
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        _reopen_standard_streams()
        sys.argv = ["scrape-contracts", *request["argv"]]
        prepare()
        conn.sendall(b'{"served": true}\n')
        conn.settimeout(_ACCEPT_TIMEOUT_S)
        if _read_exactly(conn, 3) != b"go\n":
            os._exit(1)
        conn.settimeout(None)
    except BaseException:  # noqa: BLE001 (not accepted: the client runs the command itself)
        os._exit(1)
    threading.Thread(target=_interrupt_on_hangup, args=(conn,), daemon=True).start()
    code = 1
    try:
        code = run(list(request["argv"]))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 (as a local command would: the traceback on the user's stderr)
        import traceback

        traceback.print_exc()
    finally:
        # done: the client hangs up once it has the status, which must not interrupt this child any more
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        except OSError:
            pass
        os._exit(code)


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the client hung up")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _reopen_standard_streams() -> None:
    """Python's stdin/stdout/stderr objects on the client's descriptors, buffered as a fresh process's are
    (line-buffered on a terminal), so output interleaves exactly as it would locally."""
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        encoding = getattr(old, "encoding", None) or "utf-8"
        line = name == "stderr" or os.isatty(fd)
        setattr(sys, name, open(fd, mode, buffering=1 if line and mode == "w" else -1, encoding=encoding,
                                errors="backslashreplace" if name == "stderr" else "strict", closefd=False))


def _interrupt_on_hangup(conn: socket.socket) -> None:
    """Ctrl-C in the client (or the client gone): interrupt the command, as the terminal would have."""
    try:
        conn.recv(64)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGINT)
