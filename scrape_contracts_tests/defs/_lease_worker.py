"""A scrape run in its own OS process, for test_leases_e2e: a single-target run or a batch, on the instance
of ``DAGSTER_HOME`` (Dagster's own storage classes), with the outcome written to a JSON file.

``python -m scrape_contracts_tests.defs._lease_worker single|batch --contracts-dir D --partitions p1 ...``
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any


def summary_skipped(result: Any) -> list[dict[str, str]]:
    """What a batched run's summary lists as skipped (paused, unknown, busy, lease lost)."""
    for event in result.all_events:
        if event.event_type_value != "ASSET_OBSERVATION":
            continue
        metadata = event.event_specific_data.asset_observation.metadata
        if metadata.get("stage") is not None and metadata["stage"].value == "batch_summary":
            return list(metadata["skipped"].value)
    return []


def failures(result: Any) -> list[str]:
    out = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            if data.user_failure_data is not None and data.user_failure_data.description:
                out.append(data.user_failure_data.description)
            elif data.error is not None:
                out.append(data.error.message)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="_lease_worker")
    parser.add_argument("job", choices=["single", "batch"])
    parser.add_argument("--contracts-dir", required=True)
    parser.add_argument("--contract", default="shop")
    parser.add_argument("--partitions", nargs="+", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)

    import dagster as dg

    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    from scrape_contracts.defs import build_definitions
    from scrape_contracts.defs.batch import batch_job_name
    from scrape_contracts.defs.jobs import scrape_job_name

    defs = build_definitions(args.contracts_dir)
    instance = dg.DagsterInstance.get()
    try:
        if args.job == "single":
            job = defs.resolve_job_def(scrape_job_name(args.contract))
            result = job.execute_in_process(partition_key=args.partitions[0], instance=instance,
                                            raise_on_error=False, run_id=args.run_id)
        else:
            job = defs.resolve_job_def(batch_job_name(args.contract))
            config = {"ops": {f"{args.contract}_scrape_batch": {"config": {"partitions": args.partitions}}}}
            result = job.execute_in_process(run_config=config, instance=instance, raise_on_error=False,
                                            run_id=args.run_id)
        Path(args.result).write_text(json.dumps({"success": result.success, "failures": failures(result),
                                                 "skipped": summary_skipped(result)}))
    finally:
        instance.dispose()
    return 0


if __name__ == "__main__":  # the batch's worker processes are spawned: they import this module
    sys.exit(main(sys.argv[1:]))
