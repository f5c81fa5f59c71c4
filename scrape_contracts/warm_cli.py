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
    """Have the warm process execute this command; its exit status, or None to run it here instead.

    A command the child ended on Ctrl-C ends this process by SIGINT too, as a local command dies of it (a
    shell script stops there instead of going on to its next line).
    """
    home = os.environ.get("DAGSTER_HOME")
    if not home or command_of(argv) not in SERVED or not enabled() or not _private_folder(create=False):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(_ACCEPT_TIMEOUT_S)
        conn.connect(socket_path(home))
        payload = json.dumps({"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd(),
                              "umask": _umask(), "streams": _stream_settings()}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
        reader = conn.makefile("rb")
        answer = json.loads(reader.readline() or b"{}")
        if not answer.get("served"):
            conn.close()
            return None  # refused (its code is older than ours, say) or gone: run it here
        # the child starts only on this word: had we given up waiting (and run the command here), it would
        # see the connection closed instead, and do nothing
        conn.sendall(b"go\n")
    except (OSError, ValueError):
        conn.close()
        return None  # no warm process (no daemon yet), a stale socket, a closed stdout: run it here
    except KeyboardInterrupt:
        conn.close()  # before the go: the child does nothing
        _die_of_sigint()
    # from here on the command is the child's: wait for its exit status however long the command takes
    conn.settimeout(None)
    interrupted = False
    while True:
        try:
            line = reader.readline()
            break
        except KeyboardInterrupt:
            if interrupted:
                conn.close()
                _die_of_sigint()  # a second Ctrl-C: stop waiting (the child is interrupted already)
            interrupted = True
            try:
                conn.sendall(b"interrupt\n")  # the child gets its own KeyboardInterrupt, like a local command
            except OSError:
                _die_of_sigint()
    conn.close()
    try:
        status = json.loads(line)
        code = int(status["exit"])
    except (ValueError, KeyError, TypeError):
        print("error: the warm process ended this command without an exit status (killed?); run it again "
              "(the same --idempotency-key launches nothing twice)", file=sys.stderr)
        return 1
    if status.get("interrupted"):
        _die_of_sigint()
    return code


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _stream_settings() -> dict[str, dict[str, object]]:
    """How this process writes its output (PYTHONIOENCODING, PYTHONUNBUFFERED): the child writes the same."""
    found = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        found[name] = {"encoding": getattr(stream, "encoding", None) or "utf-8",
                       "errors": getattr(stream, "errors", None) or "strict",
                       "line_buffering": bool(getattr(stream, "line_buffering", False)),
                       "write_through": bool(getattr(stream, "write_through", False))}
    return found


def _die_of_sigint() -> None:
    sys.stdout.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # not reached on Linux


# variables of Python's own that change how the same code runs; the output ones are taken over (streams)
_PYTHON_OUTPUT_VARIABLES = frozenset({"PYTHONIOENCODING", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})


def _python_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in _PYTHON_OUTPUT_VARIABLES}


# ---- the server: in the warm process ----------------------------------------------------------------------
class Listener:
    """The warm process's listening socket (non-blocking; the warm process selects on it beside stdin)."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self._inode = os.stat(path).st_ino
        self._pid = os.getpid()  # a forked child that unwinds never removes its parent's socket

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

    def gone(self) -> bool:
        """Whether its socket file was removed or replaced (a /tmp cleaner): then nothing can connect to it."""
        try:
            return os.stat(self.path).st_ino != self._inode
        except OSError:
            return True

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
        if os.getpid() != self._pid:
            return
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
        conn.settimeout(_ACCEPT_TIMEOUT_S)  # a client that connects and says nothing does not keep a child
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
        elif "--workspace" in request["argv"] or any(a.startswith("--workspace=") for a in request["argv"]):
            # another workspace imports other modules: in a process of its own, not in a fork of the daemon's
            why = "a workspace of its own"
        elif _python_variables(request["env"]) != _python_variables(dict(os.environ)):
            why = "other PYTHON* variables (PYTHONPATH, PYTHONWARNINGS, ...): the code could run differently here"
        if why:
            conn.sendall(json.dumps({"served": False, "why": why}).encode() + b"\n")
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        _reopen_standard_streams(request["streams"])
        sys.argv = ["scrape-contracts", *request["argv"]]
        prepare()
        conn.sendall(b'{"served": true}\n')
        if _read_exactly(conn, 3) != b"go\n":
            os._exit(1)
        conn.settimeout(None)
    except BaseException:  # noqa: BLE001 (not accepted: the client runs the command itself)
        os._exit(1)
    threading.Thread(target=_interrupt_on_hangup, args=(conn,), daemon=True).start()
    code, interrupted = 1, False
    try:
        code = run(list(request["argv"]))
    except SystemExit as exc:  # argparse's usage errors; a message is printed as Python prints it
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 (as a local command would: the traceback on the user's stderr)
        import traceback

        traceback.print_exc()
        code, interrupted = (130, True) if isinstance(exc, KeyboardInterrupt) else (1, False)
    finally:
        # done: the client hangs up once it has the status, which must not interrupt this child any more
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            conn.sendall(json.dumps({"exit": code, "interrupted": interrupted}).encode() + b"\n")
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


def _reopen_standard_streams(settings: dict[str, dict[str, object]]) -> None:
    """Python's stdin/stdout/stderr objects on the client's descriptors, written as the client's would be
    (its encoding, errors, line buffering and write-through), so output looks exactly as it would locally."""
    sys.stdin = open(0, "r", encoding=getattr(sys.stdin, "encoding", None) or "utf-8", closefd=False)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        wanted = settings[name]
        stream = open(fd, "w", buffering=1 if wanted["line_buffering"] else -1, encoding=str(wanted["encoding"]),
                      errors=str(wanted["errors"]), closefd=False)
        if wanted["write_through"]:
            stream.reconfigure(write_through=True)
        setattr(sys, name, stream)


def _interrupt_on_hangup(conn: socket.socket) -> None:
    """Ctrl-C in the client (or the client gone): interrupt the command, as the terminal would have."""
    try:
        conn.recv(64)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGINT)
