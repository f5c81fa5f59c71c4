"""The stop signals of the test processes: what the suite needs them to be, and a check that they still are.

The tests stop the processes they start with SIGTERM (``Popen.terminate``), and so does Dagster: every run
executed in process mirrors its compute logs through ``tail -F`` children that it terminates and then waits
up to 30 s for, once per stream. A signal a process ignores stays ignored in every child it starts (fork and
exec keep ``SIG_IGN`` and the blocked mask), so when pytest is started with SIGTERM ignored, no child dies
of ``terminate()``: each such wait runs out, and a request to a front door served in a thread of the test
(``ThreadedApi``) that runs a job took over 60 s. The CI run's processes had SIGHUP, SIGINT, SIGQUIT and
SIGTERM ignored (a background job of a non-interactive shell ignores SIGINT and SIGQUIT, ``nohup`` SIGHUP);
an ignored SIGINT alone is enough, as Dagster copies SIGINT's disposition to SIGTERM after each run in the
main thread. It imports nothing but ``signal``: its test runs it in a fresh interpreter.
"""

from __future__ import annotations

import signal

# the signals the tests and Dagster stop processes with (``terminate()``; SIGINT for a graceful stop, and
# Dagster makes SIGTERM what SIGINT is). SIGHUP and SIGQUIT stay as launched: nothing here sends them, and an
# ignored SIGHUP is what keeps a ``nohup`` run alive when its terminal goes.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _default(sig: int) -> object:
    # Python's own SIGINT handler (KeyboardInterrupt) rather than SIG_DFL: what an interpreter started with
    # SIGINT not ignored has
    return signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL


def stop_signals_disturbed() -> bool:
    """Whether a stop signal is ignored or blocked in this process (its main thread)."""
    return any(signal.getsignal(sig) == signal.SIG_IGN for sig in STOP_SIGNALS) or \
        bool(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(STOP_SIGNALS))


def restore_stop_signals() -> list[str]:
    """Undo an ignored or blocked stop signal in this process (its main thread), so the processes it starts
    die of SIGTERM; the names of what was changed."""
    changed = []
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _default(sig))
            changed.append(f"{signal.Signals(sig).name} ignored")
    blocked = set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(STOP_SIGNALS)
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        changed += [f"{signal.Signals(sig).name} blocked" for sig in sorted(blocked)]
    return changed
