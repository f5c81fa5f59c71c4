"""Sensors: sync dynamic targets from a file; find quarantined candidates for review."""


import dagster as dg

from scrape_contracts.contract.loader import LoadedContract, LoadResult
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.defs.targets import keys_for, read_targets_file


def build_targets_sensor(loaded: LoadedContract) -> dg.SensorDefinition:
    name = loaded.contract.name

    @dg.sensor(name=f"{name}_targets_sensor", minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Adds the URLs listed in {loaded.contract.targets.file} as partitions of {name!r}.")
    def targets_sensor(context: dg.SensorEvaluationContext, store: ProjectStoreResource) -> dg.SensorResult:
        try:
            keyed = keys_for(read_targets_file(loaded), allow_private=loaded.contract.fetch.allow_private_addresses)
        except (OSError, ValueError) as exc:
            return dg.SensorResult(skip_reason=f"targets file unusable: {exc}")
        store.get().add_targets(name, keyed)
        existing = set(context.instance.get_dynamic_partitions(dynamic_partitions_name(name)))
        new = [k for k in keyed if k not in existing]
        if not new:
            return dg.SensorResult(skip_reason=f"no new targets in {loaded.contract.targets.file}")
        context.log.info(f"adding {len(new)} target(s) to {name}: {', '.join(new)}")
        return dg.SensorResult(dynamic_partitions_requests=[
            dg.AddDynamicPartitionsRequest(dynamic_partitions_name(name), new)])

    return targets_sensor


def build_sensors(result: LoadResult) -> tuple[list[dg.SensorDefinition], list]:
    sensors = [build_targets_sensor(item) for item in result.contracts
               if item.contract.is_dynamic and item.contract.targets.file]
    from scrape_contracts.defs.activations import build_activation_defs
    from scrape_contracts.defs.review import build_review_job, review_notice_job, review_sensor, target_state_job

    activation_sensors, activation_jobs = build_activation_defs(result)
    return ([*sensors, review_sensor, *activation_sensors],
            [build_review_job(result), review_notice_job, target_state_job, *activation_jobs])
