"""A chunk step whose Celery worker lost the database is tried again, on any worker, rather than failing the run.

dagster-celery runs a step in a Celery task (``execute_plan``) that writes the step's events to the instance's
storage itself. When the worker loses that database (the server restarted, the network between them cut):

- if even the step's failure cannot be written, the task raises the driver's error;
- if the database is back by the time the failure is written (an event write broken mid-statement by a short
  outage), the task returns a step failure whose error is that broken connection.

Either way the run would fail, though nothing is wrong with the step. ``RetryWhenTheDatabaseIsGone``, a Celery
task annotation named by its path in ``task_annotations`` (``deploy/celery_worker.yaml``, and the batched
jobs' default ``config_source``, ``defs/executors.py``), makes Celery try the task again after 2, 4, 8, 16,
then every 30 s, 9 tries in all (about 3 minutes). The chunk's new attempt takes its leases over and leaves
out what the run recorded already (``service/batch.py``), so nothing is scraped or accepted twice. A step that
failed for any other reason ends as before.

The same annotation runs a worker process's step tasks one at a time. As a step starts, Dagster 1.13 (the
instance's ``get_yaml_python_handlers``) calls ``logging.config.dictConfig``, which takes the logging
module's lock and then every handler's; a step already running in another thread of the process holds its
event handler's lock while it writes an event and may need the module's lock for it. With ``--pool threads
--concurrency 2`` (seen in ``benchmarks/multihost.py --worker-concurrency 2``) both threads and the worker's
heartbeat stopped for good. So a second step task waits for the first, and the worker says why: run
more worker processes (``--concurrency 1`` each) for more chunks at once on a host.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

STEP_TASK = "execute_plan"  # dagster-celery's step task (dagster_celery.config.TASK_EXECUTE_PLAN_NAME)
DATABASE_RETRIES, FIRST_RETRY_S, LONGEST_RETRY_S = 9, 2, 30
# what a step failure's error says when its worker lost the database (the driver's, Dagster's, the store's)
_LOST = ("psycopg2.OperationalError", "psycopg2.InterfaceError", "DagsterPostgresException", "StoreUnavailable",
         "StoreGone")


class StepLostTheDatabase(Exception):
    """The step task returned a step failure caused by its worker losing the database: tried again."""


def lost_the_database(events: Any) -> str | None:
    """The step key of a step failure among a step task's returned events (serialized ``DagsterEvent``s) whose
    error is a lost database; None when there is none."""
    for text in events if isinstance(events, list) else []:
        try:
            event = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(event, dict) and event.get("event_type_value") == "STEP_FAILURE":
            error = json.dumps(event.get("event_specific_data"))
            if any(mark in error for mark in _LOST):
                return str(event.get("step_key") or "a step")
    return None


def _failing_when_the_database_was_lost(run: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        events = run(self, *args, **kwargs)
        step = lost_the_database(events)
        if step is not None:
            raise StepLostTheDatabase(f"step {step} failed because its worker lost the database: tried again")
        return events

    return checked


_ONE_STEP = threading.Lock()  # the step task running in this worker process, if any
log = logging.getLogger(__name__)


def _one_step_at_a_time(run: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run)
    def serial(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _ONE_STEP.acquire(blocking=False):
            log.warning("this worker process runs one step at a time: this step task waits for the one "
                        "running (two steps in one process can deadlock in Dagster's logging setup); for more "
                        "chunks at once on this host start more workers, each with --concurrency 1")
            _ONE_STEP.acquire()
        try:
            return run(self, *args, **kwargs)
        finally:
            _ONE_STEP.release()

    return serial


def _step_task_run(run: Callable[..., Any]) -> Callable[..., Any]:
    return _one_step_at_a_time(_failing_when_the_database_was_lost(run))


class RetryWhenTheDatabaseIsGone:
    """The annotation: for the step task only, one at a time per process and the tries above (Celery's
    ``autoretry_for``), on the driver's and Dagster's connection errors and on a step failure that was one
    (``StepLostTheDatabase``)."""

    def annotate(self, task: Any) -> dict[str, Any] | None:
        if task.name != STEP_TASK:
            return None
        import sqlalchemy as sa
        from dagster_postgres.utils import DagsterPostgresException

        from scrape_contracts.adapters.store import StoreUnavailable

        return {"@run": _step_task_run,
                "autoretry_for": (sa.exc.OperationalError, sa.exc.InterfaceError, DagsterPostgresException,
                                  StoreUnavailable, StepLostTheDatabase),
                "max_retries": DATABASE_RETRIES, "retry_backoff": FIRST_RETRY_S,
                "retry_backoff_max": LONGEST_RETRY_S, "retry_jitter": False}

    def annotate_any(self) -> None:
        return None
