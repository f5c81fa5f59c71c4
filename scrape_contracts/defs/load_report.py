"""``scrape/_contracts``: the contracts the code location loaded, and a check naming every file that did not.

A contract that fails to load has no asset, so nothing about it would show in the UI: only the code
server's log would say why. What shows it, with Dagster's own means:

- **Descriptions, written at load.** The description of ``scrape/_contracts`` (a markdown table of file,
  line, field and message) and of its check ``every_contract_loads`` name each broken file as soon as the
  location (re)loads: nothing to launch, no daemon needed.
- **The check's status, without anyone launching a run.** ``contracts_load_sensor`` (running by default,
  so `dagster dev` and `dagster-daemon` evaluate it) requests a run of ``scrape/_contracts`` whenever what
  the location loaded changes (its cursor holds a digest of it); the run evaluates the check, which fails
  with the table in its metadata, or passes once every file loads. The check blocks, so that run fails
  too, in the Runs list. A run and not a runless evaluation reported by the sensor: Dagster keeps one
  execution row for all runless evaluations of a check and shows the newest row, so after anyone
  materialised ``scrape/_contracts`` by hand, later runless reports would stay hidden behind it.
- **On demand.** Materialising ``scrape/_contracts`` (cheap: the YAML files are read, nothing is fetched)
  evaluates the check in a run, on an instance without a daemon.
- **When no contract loads at all** ``build_definitions`` raises ``NoContractLoaded``: the code location
  shows as errored in the UI with every error in its message, rather than as an empty asset graph.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg

from scrape_contracts.contract.loader import ContractError, LoadResult
from scrape_contracts.defs.metadata import bounded_text

CONTRACTS_KEY = dg.AssetKey(["scrape", "_contracts"])
LOAD_CHECK = "every_contract_loads"
# contract names start with a letter: this group and key never meet a contract's
GROUP = "_contracts"
_SHOWN = 20  # errors named in a description; the check's metadata has them all


class NoContractLoaded(Exception):
    """Every contract file failed to load: the code location has nothing to serve, and must say why."""


def require_a_contract(result: LoadResult) -> None:
    """Raise ``NoContractLoaded`` when there are errors and no contract loaded (an empty folder is fine)."""
    if result.contracts or not result.errors:
        return
    lines = "\n".join(f"  {error}" for error in result.errors)
    raise NoContractLoaded(
        f"no contract loaded from {result.directory}: every contract file has errors. Fix them "
        f"(`scrape-contracts validate` lists them) and reload the code location.\n{lines}")


def _file(error: ContractError, directory: Path | None) -> str:
    path = Path(error.file)
    if directory is not None and path.is_relative_to(directory):
        return str(path.relative_to(directory)) or path.name
    return error.file


def _cell(text: str) -> str:
    return bounded_text(" ".join(text.split())).replace("|", "\\|")


def errors_table(result: LoadResult) -> str:
    """The load errors as a markdown table: file, line, field, message."""
    rows = [f"| {_cell(_file(e, result.directory))} | {e.line or ''} | {_cell(e.field)} "
            f"| {_cell(e.message)} |" for e in result.errors]
    return "\n".join(["| file | line | field | message |", "| --- | --- | --- | --- |", *rows])


def _where(error: ContractError, directory: Path | None) -> str:
    where = _file(error, directory) + (f" line {error.line}" if error.line else "")
    return f"{where}: {error.field}: {error.message}" if error.field else f"{where}: {error.message}"


def summary(result: LoadResult) -> str:
    """One line per error (file, line, field, message), at most ``_SHOWN`` of them."""
    shown = [_where(e, result.directory) for e in result.errors[:_SHOWN]]
    more = len(result.errors) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def _counts(result: LoadResult) -> str:
    files = len({e.file for e in result.errors})
    names = ", ".join(sorted(result.by_name())) or "none"
    return (f"{len(result.contracts)} contract(s) loaded ({names}); "
            f"{files} file(s) did not load ({len(result.errors)} error(s))")


def evaluation(result: LoadResult) -> tuple[bool, str, dict[str, Any]]:
    """(passed, description, metadata) of ``every_contract_loads`` for this load."""
    metadata: dict[str, Any] = {
        "contracts_dir": str(result.directory),
        "contracts_loaded": len(result.contracts),
        "files_failed": len({e.file for e in result.errors}),
        "errors": len(result.errors),
        "contracts": ", ".join(sorted(result.by_name())) or "none",
        "load_errors": dg.MetadataValue.md(errors_table(result) if result.errors else "every contract loads"),
    }
    if not result.errors:
        return True, f"every contract file loads: {_counts(result)}", metadata
    return False, summary(result), metadata


def digest(result: LoadResult) -> str:
    """Changes when what the location loaded changes (which contracts, which errors), not otherwise."""
    state = {"dir": str(result.directory), "contracts": sorted(result.by_name()),
             "errors": [str(e) for e in result.errors]}
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def _asset_description(result: LoadResult) -> str:
    head = f"The contract files in `{result.directory}` as this code location loaded them: {_counts(result)}."
    if not result.errors:
        return head
    table = errors_table(_first(result))
    return f"{head} Fix them (`scrape-contracts validate`) and reload the code location.\n\n{table}"


def _first(result: LoadResult) -> LoadResult:
    return LoadResult(contracts=result.contracts, errors=result.errors[:_SHOWN], directory=result.directory)


def _check_description(result: LoadResult) -> str:
    if not result.errors:
        return f"Every contract file in {result.directory} loads ({len(result.contracts)} at this load)."
    return f"Every contract file in {result.directory} loads. Failing at this load: {summary(result)}"


def build_load_report(result: LoadResult, *, group_name: str | None = None
                      ) -> tuple[dg.AssetsDefinition, dg.SensorDefinition]:
    """``scrape/_contracts`` with its check, and the sensor that evaluates the check when the load changes."""
    spec = dg.AssetCheckSpec(LOAD_CHECK, asset=CONTRACTS_KEY, blocking=True,
                             description=_check_description(result))

    @dg.asset(key=CONTRACTS_KEY, group_name=group_name or GROUP, description=_asset_description(result), check_specs=[spec],
              kinds={"yaml"})
    def contracts() -> dg.MaterializeResult:
        """The contracts the code location loaded, and each file that did not load."""
        passed, description, metadata = evaluation(result)
        return dg.MaterializeResult(metadata=metadata, check_results=[dg.AssetCheckResult(
            check_name=LOAD_CHECK, passed=passed, severity=dg.AssetCheckSeverity.ERROR,
            description=description, metadata=metadata)])

    @dg.sensor(name="contracts_load_sensor", minimum_interval_seconds=30, target=contracts,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Materialises scrape/_contracts, which evaluates every_contract_loads, whenever "
                           "what the code location loaded changes (which contracts, which load errors).")
    def contracts_load_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {"digest": None, "reports": 0}
        now = digest(result)
        if cursor["digest"] == now:
            return dg.SensorResult(skip_reason=f"already reported: {_counts(result)}", cursor=context.cursor)
        reports = cursor["reports"] + 1
        # the count keeps run keys unique when the location goes back to a state it was in before
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=f"contracts-load-{reports}-{now}",
                                        asset_selection=[CONTRACTS_KEY],
                                        tags={"scrape_contracts/kind": "contracts_load"})],
            cursor=json.dumps({"digest": now, "reports": reports}))

    return contracts, contracts_load_sensor
