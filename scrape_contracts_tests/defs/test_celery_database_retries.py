"""A step task whose worker lost the database is tried again (``executors.RetryWhenTheDatabaseIsGone``, named
in the shipped worker settings); any other failure is not. A Celery app of its own, its tasks run eagerly in
this process (the retries too, without their waits): the annotation is what is under test, the multi-host
outage test runs it on real workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from celery import Celery

from scrape_contracts.defs.executors import DATABASE_RETRIES, FAULT_SETTINGS, STEP_TASK

REPO = Path(__file__).resolve().parents[2]


def _step_task(failures: list[BaseException]) -> tuple[Celery, list[int]]:
    app = Celery("annotations", set_as_current=False)
    shipped = yaml.safe_load((REPO / "deploy" / "celery_worker.yaml").read_text())
    app.conf.task_annotations = shipped["execution"]["config"]["config_source"]["task_annotations"]
    app.conf.task_always_eager = True
    calls: list[int] = []

    @app.task(name=STEP_TASK, bind=True, shared=False)  # this app's own, not every app's
    def execute_plan(self: object) -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "done"

    app.finalize()
    return app, calls


def _lost() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("INSERT INTO event_logs ...", {}, Exception("server closed the connection"))


def test_the_shipped_worker_settings_name_the_same_annotation_as_the_jobs_executor() -> None:
    shipped = yaml.safe_load((REPO / "deploy" / "celery_worker.yaml").read_text())
    source = shipped["execution"]["config"]["config_source"]
    assert source["task_annotations"] == FAULT_SETTINGS["task_annotations"]


def test_a_step_task_that_lost_the_database_is_tried_again_and_another_failure_is_not() -> None:
    app, calls = _step_task([_lost(), _lost()])
    assert app.tasks[STEP_TASK].apply().get() == "done"
    assert len(calls) == 3
    app, calls = _step_task([ValueError("a bug in a step")])
    with pytest.raises(ValueError):
        app.tasks[STEP_TASK].apply().get()
    assert len(calls) == 1


def test_the_tries_are_bounded() -> None:
    app, calls = _step_task([_lost() for _ in range(DATABASE_RETRIES + 5)])
    with pytest.raises(sa.exc.OperationalError):
        app.tasks[STEP_TASK].apply().get()
    assert len(calls) == DATABASE_RETRIES + 1
