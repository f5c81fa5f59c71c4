"""A step task whose worker lost the database is tried again (``celery_retries.RetryWhenTheDatabaseIsGone``,
named in the shipped worker settings), whether it raised or returned that step failure; any other failure is
not. A Celery app of its own, its tasks run eagerly in
this process (the retries too, without their waits): the annotation is what is under test, the multi-host
outage test runs it on real workers."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from celery import Celery

from scrape_contracts.defs.celery_retries import DATABASE_RETRIES, STEP_TASK
from scrape_contracts.defs.executors import FAULT_SETTINGS

REPO = Path(__file__).resolve().parents[2]


def _step_task(failures: list[BaseException | str]) -> tuple[Celery, list[int]]:
    app = Celery("annotations", set_as_current=False)
    shipped = yaml.safe_load((REPO / "deploy" / "celery_worker.yaml").read_text())
    app.conf.task_annotations = shipped["execution"]["config"]["config_source"]["task_annotations"]
    app.conf.task_always_eager = True
    calls: list[int] = []

    @app.task(name=STEP_TASK, bind=True, shared=False)  # this app's own, not every app's
    def execute_plan(self: object) -> str:
        calls.append(1)
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, str):  # returned: the step's failure was written, as dagster-celery returns it
                return ['{"__class__": "DagsterEvent", "event_type_value": "STEP_START"}', failure]
            raise failure
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


def _step_failure(error: str) -> str:
    # a serialized DagsterEvent of a step failure, in the shape dagster-celery returns (the fields read here)
    return json.dumps({"__class__": "DagsterEvent", "event_type_value": "STEP_FAILURE",
                       "step_key": "shop_scrape_chunk[chunk_2]", "event_specific_data": {
                           "__class__": "StepFailureData", "error": {
                               "__class__": "SerializableErrorInfo", "cls_name": "OperationalError",
                               "message": error, "stack": [], "cause": None, "context": None}}})


def test_a_step_failure_returned_for_a_lost_connection_is_tried_again_and_another_one_is_not() -> None:
    lost = _step_failure("sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) server closed the "
                         "connection unexpectedly\n")
    app, calls = _step_task([lost])
    assert app.tasks[STEP_TASK].apply().get() == "done"
    assert len(calls) == 2
    other = _step_failure("ValueError: a bug in a step\n")
    app, calls = _step_task([other])
    events = app.tasks[STEP_TASK].apply().get()
    assert len(calls) == 1 and events[-1] == other  # the run fails with it, as before


def test_the_tries_are_bounded() -> None:
    app, calls = _step_task([_lost() for _ in range(DATABASE_RETRIES + 5)])
    with pytest.raises(sa.exc.OperationalError):
        app.tasks[STEP_TASK].apply().get()
    assert len(calls) == DATABASE_RETRIES + 1


def test_two_step_tasks_of_one_worker_process_run_one_after_the_other(caplog: pytest.LogCaptureFixture) -> None:
    # two threads of a `--pool threads --concurrency 2` worker: in one process two Dagster steps can deadlock
    # in its logging setup, so the second waits for the first (and the worker says why)
    app = Celery("one-at-a-time", set_as_current=False)
    shipped = yaml.safe_load((REPO / "deploy" / "celery_worker.yaml").read_text())
    app.conf.task_annotations = shipped["execution"]["config"]["config_source"]["task_annotations"]
    app.conf.task_always_eager = True
    inside: list[int] = []
    most = [0]
    first_in, go_on = threading.Event(), threading.Event()

    @app.task(name=STEP_TASK, bind=True, shared=False)
    def execute_plan(self: object, n: int) -> int:
        inside.append(n)
        most[0] = max(most[0], len(inside))
        if n == 1:
            first_in.set()
            go_on.wait(60)
        inside.remove(n)
        return n

    app.finalize()
    done: dict[int, int] = {}
    first = threading.Thread(target=lambda: done.update({1: app.tasks[STEP_TASK].apply((1,)).get()}))
    second = threading.Thread(target=lambda: done.update({2: app.tasks[STEP_TASK].apply((2,)).get()}))
    with caplog.at_level(logging.WARNING, logger="scrape_contracts.defs.celery_retries"):
        first.start()
        assert first_in.wait(30)
        second.start()
        # the second task either waits (and says so) or, were the tasks not kept apart, runs beside the first
        deadline = time.monotonic() + 30
        while "one step at a time" not in caplog.text and most[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert most[0] == 1, "the second step task ran beside the first"
        go_on.set()
        first.join(30)
        second.join(30)
    assert done == {1: 1, 2: 2} and most[0] == 1
    assert "start more workers, each with --concurrency 1" in caplog.text
