"""``run --wait`` says in one line why a run failed when a worker lost the database (its step's own failure
could not be written there: the executor carries the worker's error into the run's failure), from the
failure texts as Dagster records them."""

from __future__ import annotations

from scrape_contracts.cli.runs import database_loss

_CELERY = ('Execution of run for "scrape_shop_batch_job" failed. An exception was thrown during execution.\n\n'
           "dagster._core.errors.DagsterSubprocessError: During celery execution errors occurred in workers:\n"
           "[shop_scrape_chunk[chunk_0]]: {error}\n\nStack Trace:\n  File \"/x/core_execution_loop.py\", line 9")


def test_a_run_whose_worker_could_not_reach_the_database_names_it() -> None:
    refused = ('sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at '
               '"10.213.4.1", port 5432 failed: Connection refused\n\tIs the server running on that host?')
    assert database_loss(["Execution of step failed.", _CELERY.format(error=refused)]) == \
        "a worker could not reach the database at 10.213.4.1:5432: Connection refused"


def test_the_stores_own_reason_comes_first() -> None:
    gone = ("scrape_contracts.adapters.store.errors.StoreGone: the project store at 10.213.4.1:5432 was "
            "unreachable for 60 s: connection to server at \"10.213.4.1\", port 5432 failed: Connection refused; "
            "run it again once the database answers")
    assert database_loss([_CELERY.format(error=gone)]) == (
        'the project store at 10.213.4.1:5432 was unreachable for 60 s: connection to server at "10.213.4.1", '
        "port 5432 failed: Connection refused")


def test_a_broken_connection_is_said_and_any_other_failure_is_not() -> None:
    broken = "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) server closed the connection unexpectedly"
    assert database_loss([_CELERY.format(error=broken)]) == \
        "a worker lost its connection to the database (server closed the connection)"
    assert database_loss([_CELERY.format(error="ValueError: a bug in a step")]) is None
    assert database_loss([]) is None
