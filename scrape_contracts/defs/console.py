"""The batched jobs' console logger: the run's own INFO lines (progress per chunk) and warnings, not Dagster's
DEBUG events, and an interrupted step in one line rather than its stack."""

from __future__ import annotations

import logging
from typing import Any

import dagster as dg

_INTERRUPTED = "DagsterExecutionInterruptedError"


class _InterruptInOneLine(logging.Filter):
    """Ctrl-C, or a run's termination, fails the running step with DagsterExecutionInterruptedError, and the
    console printed its whole stack before the command's own one-line error. The event log keeps the stack;
    the console keeps the failure's first line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _INTERRUPTED in message and "\n" in message:
            record.msg, record.args = f"{message.splitlines()[0]} (interrupted)", ()
        return True


@dg.logger(dg.colored_console_logger.config_schema,
           description="Dagster's colored console logger, an interrupted step's failure in one line.")
def _console(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger: Any = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_InterruptInOneLine())
    return logger


# Dagster's console logger prints every event at DEBUG into the step's captured output: a fifth of a batched
# run's time, measured with py-spy (2,000 materialisations). The event log stores every event either way; the
# console keeps the run's own INFO lines (progress per chunk) and warnings. Dagster uses a job's loggers only
# when the run config names them (else its default DEBUG console), so the job's default config names it:
# launched runs printed 2,000 DEBUG lines until it did.
QUIET_CONSOLE = {"console": _console.configured({"log_level": "INFO", "name": "dagster"})}
QUIET_CONFIG = {"loggers": {"console": {}}}
