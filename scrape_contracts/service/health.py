"""Per contract, how its targets are doing: what ``scrape/_health`` shows and (later) the API's health."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from scrape_contracts.adapters.store import INDETERMINATE_PAUSE, REVIEW_PAUSE, Budget, ProjectStore, day_start
from scrape_contracts.contract.loader import LoadedContract


@dataclass(frozen=True)
class ContractHealth:
    contract: str
    targets: int
    last_success: str | None  # when a scrape last succeeded: accepted or unchanged (ISO 8601, UTC)
    age_s: float | None  # seconds since then
    failing_targets: int  # targets whose last scrape failed or was rejected
    longest_failure_streak: int
    paused: int
    review_backlog: int  # quarantined candidates waiting for a decision
    heal_budget_left: int  # heal attempts left over all targets
    # provider contracts: targets paused because a submission may have made a job nobody recorded
    indeterminate: int = 0
    provider_spend_today: float | None = None  # what its provider jobs cost since 00:00 UTC
    budget_paused: str | None = None  # the contract is paused for its cost budget: why
    # contracts with fetch.proxies: each proxy's health as the last run that used it left it (the project
    # store's, which the next run starts from)
    proxies: tuple[dict, ...] = ()

    def as_dict(self) -> dict:
        return asdict(self)


def contract_health(store: ProjectStore, loaded: Sequence[LoadedContract],
                    now: dt.datetime | None = None) -> list[ContractHealth]:
    now = now or dt.datetime.now(dt.timezone.utc)
    found = []
    for item in loaded:
        name, budget = item.contract.name, item.contract.healing.budget
        states = store.states(name)
        # accepted versions, and successes that found the page unchanged (no new version, but fresh data)
        latest = [_utc(v.created_at) for v in store.latest_accepted_all(name)]
        latest += [s.last_success_at for s in states.values() if s.last_success_at is not None]
        newest = max(latest) if latest else None
        keys = set(states) | {t.partition_key for t in item.contract.static_targets} | set(store.list_targets(name))
        found.append(ContractHealth(
            contract=name, targets=len(keys),
            last_success=newest.isoformat() if newest else None,
            age_s=round((now - newest).total_seconds(), 1) if newest else None,
            failing_targets=sum(1 for s in states.values() if s.failure_streak),
            longest_failure_streak=max((s.failure_streak for s in states.values()), default=0),
            paused=sum(1 for s in states.values() if s.paused),
            review_backlog=sum(1 for s in states.values()
                               if s.paused and (s.pause_reason or "").startswith(REVIEW_PAUSE)),
            heal_budget_left=sum(max(0, budget - states[k].heal_attempts) if k in states else budget
                                 for k in keys),
            proxies=proxy_rows(store, item, now),
            **_provider_health(store, item, states, now),
        ))
    return found


def proxy_rows(store: ProjectStore, item: LoadedContract, now: dt.datetime) -> tuple[dict, ...]:
    """Each proxy of the contract that a run has used, in the contract's order: as the last run left it.
    A quarantined proxy stays quarantined after ``recheck_at`` until a request re-checks it."""
    names = [p.label for p in item.contract.fetch.proxies]
    if not names:
        return ()
    stored = {row.proxy: row for row in store.proxy_health(item.contract.name)}
    return tuple({
        "proxy": name, "quarantined": row.quarantined, "score": round(row.score, 3),
        "latency_ms": None if row.latency_s is None else round(row.latency_s * 1000, 1),
        "recheck_at": None if row.recheck_at is None else row.recheck_at.isoformat(),
        "recheck_in_s": None if row.recheck_at is None else round(max(0.0, (row.recheck_at - now).total_seconds()), 1),
        "rest_s": row.rest_s, "requests": row.requests, "failures": row.failures, "quarantines": row.quarantines,
        "rechecks": row.rechecks, "run_id": row.run_id, "updated_at": row.updated_at.isoformat(),
    } for name in names if (row := stored.get(name)) is not None)


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value


def _provider_health(store: ProjectStore, item: LoadedContract, states: dict, now: dt.datetime) -> dict:
    fetch = item.contract.fetch
    if fetch.adapter != "provider":
        return {}
    name = item.contract.name
    spent = store.provider_spend(name, since=day_start(now))
    paused = None
    if fetch.provider_settings.budget is not None and fetch.provider_settings.budget.per == "day":
        budget = fetch.provider_settings.budget
        paused = store.budget_left(name, Budget(budget.amount, budget.per, budget.currency))[1]
    return {"indeterminate": sum(1 for s in states.values()
                                 if s.paused and (s.pause_reason or "").startswith(INDETERMINATE_PAUSE)),
            "provider_spend_today": spent.total, "budget_paused": paused}
