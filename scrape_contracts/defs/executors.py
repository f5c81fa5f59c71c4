"""Where a batched run's steps execute: in the run's own process (one machine), or on Celery workers.

``Scale`` is the choice, from the component's ``chunks:`` / ``executor:`` attributes or the settings'
variables (``SCRAPE_CONTRACTS_CHUNKS``, ``SCRAPE_CONTRACTS_EXECUTOR``, ``SCRAPE_CONTRACTS_CELERY_BROKER``). The
Celery executor is dagster-celery's own (the optional extra ``[celery]``); its settings here are the job's
default run config, so the launchpad shows them and a run's config may still change them. The settings the
faults need (docs/scale.md, Beyond one machine) are merged under whatever the user gives:

- ``task_acks_late`` and ``task_reject_on_worker_lost``: a chunk is acknowledged when it ends, so a worker
  killed mid-chunk leaves it with the broker, which hands it to another worker;
- a short ``broker_heartbeat``: a frozen worker (SIGSTOP, a host cut off) is seen gone within seconds and its
  chunk handed on (the new attempt's lease tokens refuse the frozen one's commits, defs/leases.py);
- ``worker_prefetch_multiplier`` 1: a worker holds no chunk it has not started, so none waits behind a long one;
- ``task_annotations``: a step task that failed because its worker lost the database (Dagster could not even
  write the step's failure there, or its failure came from the database gone) is tried again later on any
  worker (``celery_retries.py``), rather than failing the run; the chunk's new attempt leaves out what the
  earlier one recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from scrape_contracts import settings

IN_PROCESS, CELERY = "in_process", "celery"
FAULT_SETTINGS: Mapping[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "broker_heartbeat": 10,
    "worker_prefetch_multiplier": 1,
    "task_annotations": "scrape_contracts.defs.celery_retries.RetryWhenTheDatabaseIsGone",
}


class ExecutorUnavailable(dg.DagsterInvalidDefinitionError):
    """``executor: celery`` without dagster-celery installed, or an executor this project does not know."""


@dataclass(frozen=True)
class Scale:
    """``chunks``: chunk steps per batched run; ``executor``: ``in_process`` or ``celery``; ``celery``: the
    Celery executor's config (``broker``, ``backend``, ``config_source``, as dagster-celery names them)."""

    chunks: int = 1
    executor: str = IN_PROCESS
    celery: Mapping[str, Any] = field(default_factory=dict)

    @property
    def chunked(self) -> bool:
        """A plan, chunk steps and a summary, rather than one step. On Celery always: the job a worker loads
        from the code location must have the same steps whatever the chunk count."""
        return self.chunks > 1 or self.executor != IN_PROCESS


def scale_from(chunks: int | None = None, executor: str | Mapping[str, Any] | None = None) -> Scale:
    """The component's attributes where given, else the settings' variables."""
    count = chunks if chunks is not None else settings.chunks()
    if count < 1:
        raise ExecutorUnavailable(f"chunks: {count} must be 1 or more")
    if executor is None:
        executor = settings.executor()
    if isinstance(executor, str):
        name, config = executor, {}
    elif len(executor) == 1:
        [(name, config)] = executor.items()
        config = dict(config or {})
    else:
        raise ExecutorUnavailable(f"executor: {dict(executor)!r} must name one executor, e.g. "
                                  "{celery: {broker: 'pyamqp://guest@rabbitmq//'}} or in_process")
    if name not in settings.EXECUTORS:
        raise ExecutorUnavailable(f"executor: {name!r} is not one of {', '.join(settings.EXECUTORS)}")
    if name == CELERY and "broker" not in config and settings.celery_broker():
        config["broker"] = settings.celery_broker()
    return Scale(count, name, config)


def executor_for(scale: Scale) -> tuple[dg.ExecutorDefinition, dict[str, Any]]:
    """The batched jobs' executor and its part of their default run config."""
    if scale.executor == IN_PROCESS:
        return dg.in_process_executor, {}
    try:
        from dagster_celery import celery_executor
    except ImportError:
        raise ExecutorUnavailable("executor: celery needs dagster-celery: pip install 'scrape_contracts[celery]'"
                                  ) from None
    config = dict(scale.celery)
    config["config_source"] = {**FAULT_SETTINGS, **dict(config.get("config_source") or {})}
    return celery_executor, {"execution": {"config": config}}
