"""``scrape/_health``: one non-partitioned asset that summarises every contract (service/health.py)."""

import dagster as dg

from scrape_contracts.contract.loader import LoadResult
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.service.health import contract_health

HEALTH_KEY = dg.AssetKey(["scrape", "_health"])
_COLUMNS = ("contract", "targets", "last_success", "age_s", "failing_targets", "longest_failure_streak",
            "paused", "review_backlog", "heal_budget_left", "indeterminate", "provider_spend_today",
            "budget_paused", "proxies")


def _proxies_cell(rows: tuple[dict, ...]) -> str:
    return "; ".join(f"{r['proxy']} {'quarantined' if r['quarantined'] else 'ok'} score {r['score']} "
                     f"({r['failures']}/{r['requests']} failed)" for r in rows) or "None"


def build_health_asset(result: LoadResult, *, group_name: str | None = None) -> dg.AssetsDefinition:
    contracts = list(result.contracts)

    @dg.asset(key=HEALTH_KEY, group_name=group_name or "_health",
              description="Per contract: last success and its age, failing targets and the longest failure "
                          "streak, paused targets, review backlog, heal budget left, indeterminate provider "
                          "submissions, provider spend today and a budget pause; each proxy's health as the "
                          "last run that used it left it. Materialise it (or schedule it) to refresh.")
    def health(context: dg.AssetExecutionContext, store: ProjectStoreResource) -> dg.MaterializeResult:
        rows = contract_health(store.get(), contracts)
        table = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
        table += ["| " + " | ".join(_proxies_cell(r.proxies) if c == "proxies" else str(getattr(r, c))
                                    for c in _COLUMNS) + " |" for r in rows]
        return dg.MaterializeResult(metadata={
            "contracts": dg.MetadataValue.md("\n".join(table)),
            "summary": dg.MetadataValue.json([r.as_dict() for r in rows]),
            "paused": sum(r.paused for r in rows), "review_backlog": sum(r.review_backlog for r in rows),
            "failing_targets": sum(r.failing_targets for r in rows),
            "indeterminate": sum(r.indeterminate for r in rows),
            "proxies_quarantined": sum(1 for r in rows for p in r.proxies if p["quarantined"])})

    return health


health_job = dg.define_asset_job("health_job", selection=dg.AssetSelection.assets(HEALTH_KEY),
                                 description="Refreshes scrape/_health (health_schedule runs it).")
health_schedule = dg.ScheduleDefinition(
    name="health_schedule", job=health_job,
    cron_schedule="*/15 * * * *",  # every 15 minutes: a cheap read of the project store, no fetching
    default_status=dg.DefaultScheduleStatus.RUNNING,  # the summary should not go stale itself
    description="Materialises scrape/_health every 15 minutes (needs dagster-daemon).")
