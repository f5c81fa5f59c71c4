"""Every name this integration gives a Dagster object or a run tag, defined once.

Assets, jobs and schedules of a contract are named from the contract's name; tags say where a run came from
and what it scrapes, so admission control (tag concurrency limits), the CLI and the UI read the same words.
"""

from __future__ import annotations

import dagster as dg

# every run of a contract's jobs carries it (the jobs set it); `tag_concurrency_limits` may cap runs per value
CONTRACT_TAG = "scrape_contracts/contract"
# "<contract>/<target>" on a single-target run started by the CLI, the API, schedules and sensors
TARGET_TAG = "scrape_contracts/target"
# "<contract>/<i>-of-<n>" on a batched run
BATCH_TAG = "scrape_contracts/batch"
# "true" on a run: fetch every page again without validators and extract it, even when it did not change
FORCE_TAG = "scrape_contracts/force"
# who started a run: cli, cli-reextract, api, schedule, sensor, ...
TRIGGER_TAG = "scrape_contracts/trigger"
IDEMPOTENCY_TAG = "scrape_contracts/idempotency_key"

REVIEW_HINT = "accept or reject with review_job or `scrape-contracts review accept|reject C TARGET`"


def scrape_pool(contract: str) -> str:
    """The op concurrency pool of every step that fetches for ``contract`` (the candidate, a batch): UI
    launches, backfills and this project's own runs alike. Unlimited until a platform team sets a limit."""
    return f"scrape/{contract}"


def candidate_key(contract: str) -> dg.AssetKey:
    return dg.AssetKey(["scrape", contract, "candidate"])


def accepted_key(contract: str) -> dg.AssetKey:
    return dg.AssetKey(["scrape", contract])


def targets_key(contract: str) -> dg.AssetKey:
    """The targets discovery found (``discover:``), upstream of the candidate."""
    return dg.AssetKey(["scrape", contract, "targets"])


def discover_job_name(contract: str) -> str:
    return f"discover_{contract}_job"


def discover_schedule_name(contract: str) -> str:
    return f"discover_{contract}_schedule"


def scrape_job_name(contract: str) -> str:
    return f"scrape_{contract}_job"


def batch_job_name(contract: str) -> str:
    return f"scrape_{contract}_batch_job"


def schedule_name(contract: str) -> str:
    return f"scrape_{contract}_schedule"


def review_command(contract: str, partition: str) -> str:
    """What a reviewer runs for this target (the same decision is review_job in the Launchpad)."""
    return (f"scrape-contracts review accept|reject {contract} {partition} --reviewer NAME --reason WHY "
            "(or review_job in the Launchpad)")


# records a person's decision on an indeterminate provider submission (defs/reconcile.py)
RECONCILE_JOB = "reconcile_job"


def failures_job_name(contract: str) -> str:
    """A contract's dead letters: the targets whose last runs failed, and their replay (defs/failures.py)."""
    return f"scrape_{contract}_failures_job"


def reconcile_command(contract: str, partition: str) -> str:
    return (f"scrape-contracts reconcile {contract} {partition} --job-id ID (or --resubmit) --by NAME "
            "--reason WHY (or reconcile_job in the Launchpad)")
