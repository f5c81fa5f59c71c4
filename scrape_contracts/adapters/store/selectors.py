"""Selector versions: version 1 is the contract's YAML, every heal adds one (compare-and-swap on its parent)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import selector_versions
from scrape_contracts.adapters.statuses import OutboxKind, SelectorSource
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.leases import check_fence
from scrape_contracts.adapters.store.errors import SelectorConflict
from scrape_contracts.adapters.store.rows import SelectorVersion, utc_now, selector_version_of


class SelectorsMixin(Connected):
    def current_selectors(self, contract: str, contract_selectors: dict[str, str]) -> SelectorVersion:
        """The selector set in force; version 1 is the YAML. An edited YAML starts a new line of versions.

        A healed selector outlives a contract edit only when the contract's selector of its field did not
        change: the user who rewrites a selector means that one, the fields they left alone keep their heal.
        """
        for _ in range(5):
            latest = self._latest_selectors(contract)
            if latest is not None and latest.contract_selectors == contract_selectors:
                return latest
            selectors, changes = carried_over(latest, contract_selectors)
            try:
                return self.add_selector_version(
                    contract, parent_version=latest.version if latest else None,
                    selectors=selectors, contract_selectors=dict(contract_selectors),
                    source=SelectorSource.CONTRACT, changes=changes,
                )
            except SelectorConflict:
                continue
        raise SelectorConflict(f"could not register the selectors of contract {contract!r}: too much contention")

    def _latest_selectors(self, contract: str) -> SelectorVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(selector_versions).where(selector_versions.c.contract == contract)
                .order_by(selector_versions.c.version.desc()).limit(1)
            ).first()
        return selector_version_of(row) if row else None

    def add_selector_version(self, contract: str, *, parent_version: int | None, selectors: dict[str, str],
                             contract_selectors: dict[str, str], source: SelectorSource,
                             changes: dict[str, Any],
                             run_id: str | None = None, partition: str | None = None) -> SelectorVersion:
        """Compare-and-swap: succeeds only if ``parent_version`` is still the newest version."""
        version = (parent_version or 0) + 1
        try:
            with self._tx() as conn:
                if partition is not None:  # a heal, by the scrape of one target
                    check_fence(conn, self, [(contract, partition)])
                newest = conn.execute(
                    sa.select(sa.func.max(selector_versions.c.version))
                    .where(selector_versions.c.contract == contract)
                ).scalar()
                if newest != parent_version:
                    raise SelectorConflict(
                        f"selectors of {contract!r} moved from version {parent_version} to {newest} meanwhile"
                    )
                conn.execute(selector_versions.insert().values(
                    contract=contract, version=version, parent_version=parent_version, selectors=selectors,
                    contract_selectors=contract_selectors, source=source, run_id=run_id, partition=partition,
                    changes=changes, created_at=utc_now(),
                ))
                if source == SelectorSource.HEAL:
                    _outbox.write(conn, OutboxKind.HEALED, [(contract, partition or "", version, {
                        "changes": changes, "run_id": run_id})])
        except IntegrityError:
            raise SelectorConflict(f"selector version {version} of {contract!r} was written by another run") from None
        return self.selector_version(contract, version)  # type: ignore[return-value]

    def selector_version(self, contract: str, version: int) -> SelectorVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(selector_versions).where(
                selector_versions.c.contract == contract, selector_versions.c.version == version)).first()
        return selector_version_of(row) if row else None

    def selector_history(self, contract: str) -> list[SelectorVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(selector_versions).where(selector_versions.c.contract == contract)
                                .order_by(selector_versions.c.version)).all()
        return [selector_version_of(r) for r in rows]


def carried_over(latest: SelectorVersion | None, contract_selectors: dict[str, str]
                 ) -> tuple[dict[str, str], dict[str, Any]]:
    """(selectors, changes) of the version an edited contract starts from ``latest``.

    Each field keeps its healed selector when the contract's selector it was healed from is the one in the
    edited YAML, and takes the YAML's otherwise; ``changes`` says which heals were kept and which dropped.
    """
    selectors = dict(contract_selectors)
    changes: dict[str, Any] = {}
    if latest is None:
        return selectors, changes
    for name, own in contract_selectors.items():
        healed = latest.selectors.get(name)
        if healed is None or healed == latest.contract_selectors.get(name):
            continue  # not healed: nothing to keep or drop
        if latest.contract_selectors.get(name) == own:
            selectors[name] = healed
            changes[name] = {"kept": healed, "contract_selector": own}
        else:
            changes[name] = {"dropped": healed, "old_contract_selector": latest.contract_selectors.get(name),
                             "contract_selector": own}
    return selectors, changes
