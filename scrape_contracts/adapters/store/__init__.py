"""The project store: accepted versions, candidates, selector versions, reviews, partition state.

One SQLAlchemy URL (SQLite by default, PostgreSQL in production). Every write that must not be half-done
is one transaction; races are settled by unique constraints (one accepted version per candidate, one
selector version number per contract) rather than by hoping two runs never meet. The tables are in
``adapters/schema.py``, their status enums in ``adapters/statuses.py``; ``migrations`` creates and upgrades
them the first time a process opens the store.

``ProjectStore`` is put together from one part per responsibility: ``recording`` (storing and recording
candidates, quarantine), ``acceptance`` (accepting exactly once, reading accepted versions), ``review``,
``selectors`` (selector versions), ``state`` (partition state, dynamic targets), ``discovered`` (the source
that found a target, gone or back), ``leases`` (one holder per target, fenced commits), ``provider_jobs`` (a
hosted provider's jobs, submit markers, spend), ``proxy_health`` (each proxy's health across runs), ``repairs`` (a provider's repair proposals and their review), ``views`` (the typed view of a contract's accepted records,
PostgreSQL); ``engines`` holds the connection pools and ``rows`` the values handed out.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from scrape_contracts.adapters.schema import accepted, candidates, metadata, reviews
from scrape_contracts.adapters.statuses import AcceptSource, CandidateStatus, Decision, SelectorSource
from scrape_contracts.adapters.store.recording import CandidatesMixin
from scrape_contracts.adapters.store.discovered import (
    DiscoveredTargetsMixin, DiscoveryChanges, FoundTarget, KnownTarget,
)
from scrape_contracts.adapters.store.engines import new_engine, open_engines, schema_state, shown_url, upgrade_schema
from scrape_contracts.adapters.store.errors import (
    AlreadyAccepted, LeaseLost, LostLease, NothingToReview, SelectorConflict, StaleCandidate, StoreError,
    StoreGone, StoreNotFound, StoreTooNew, StoreUnavailable, Superseded, TargetBusy, busy_message, unavailable, unreachable,
)
from scrape_contracts.adapters.store.discovery_pages import DiscoveryPagesMixin
from scrape_contracts.adapters.store.leases import LeaseGrant, LeasesMixin
from scrape_contracts.adapters.store.provider_jobs import (
    INDETERMINATE_PAUSE, Budget, BudgetSpent, NothingToReconcile, ProviderJob, ProviderJobsMixin, Spend,
    day_start,
)
from scrape_contracts.adapters.store.proxy_health import ProxyHealthMixin, StoredProxyHealth
from scrape_contracts.adapters.store.repairs import REPAIR_PROPOSED, RepairDecided, RepairProposal, RepairsMixin
from scrape_contracts.adapters.store.review import ReviewMixin
from scrape_contracts.adapters.store.rows import (
    AcceptedVersion, Candidate, CandidateAction, Lease, NewCandidate, PartitionState, RecordedCandidate, Review,
    SelectorVersion,
)
from scrape_contracts.adapters.store.selectors import SelectorsMixin, carried_over
from scrape_contracts.adapters.store.state import REVIEW_PAUSE, PartitionStateMixin, TargetsMixin
from scrape_contracts.adapters.store.views import VIEW_SCHEMA, AcceptedViewsMixin


class ProjectStore(CandidatesMixin, ReviewMixin, SelectorsMixin, PartitionStateMixin, TargetsMixin,
                   DiscoveredTargetsMixin, DiscoveryPagesMixin, LeasesMixin, ProviderJobsMixin, RepairsMixin,
                   AcceptedViewsMixin, ProxyHealthMixin):
    """The project store at one SQLAlchemy URL (its schema created or upgraded on first open)."""


def existing_store(url: str) -> ProjectStore:
    """The store at ``url`` if one is there; ``StoreNotFound`` rather than creating an empty one (readers)."""
    if url not in open_engines:
        parsed = sa.engine.make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            if parsed.database not in (None, "", ":memory:") and not Path(parsed.database).is_file():
                raise StoreNotFound(f"no project store at {parsed.database} (the file does not exist)")
        else:
            engine = sa.create_engine(url, connect_args={"connect_timeout": 10}
                                      if parsed.get_backend_name() == "postgresql" else {})
            try:
                with engine.connect() as conn:
                    found = sa.inspect(conn).has_table(candidates.name)
            except (OperationalError, sa.exc.InterfaceError) as exc:
                first = str(exc.orig if getattr(exc, "orig", None) else exc).strip().splitlines()[0]
                raise StoreNotFound(f"cannot connect to the project store at {shown}: {first}") from None
            finally:
                engine.dispose()
            if not found:
                raise StoreNotFound(f"no project store in {shown} (the database has no scrape_contracts tables)")
    return ProjectStore(url)


_engines = open_engines  # the tests' handle on the same dict

__all__ = [
    "INDETERMINATE_PAUSE", "REPAIR_PROPOSED", "RepairDecided", "RepairProposal", "Budget", "BudgetSpent", "NothingToReconcile", "ProviderJob", "Spend", "day_start",
    "REVIEW_PAUSE", "AcceptSource", "AcceptedVersion", "AlreadyAccepted", "Candidate", "CandidateAction",
    "CandidateStatus", "Decision", "DiscoveryChanges", "FoundTarget", "KnownTarget", "Lease", "LeaseGrant",
    "LeaseLost", "LostLease", "NewCandidate",
    "NothingToReview", "OperationalError", "PartitionState", "ProjectStore", "RecordedCandidate", "Review",
    "SelectorConflict", "SelectorSource", "SelectorVersion", "StaleCandidate", "StoreError", "StoreGone",
    "StoreNotFound", "StoreTooNew", "StoreUnavailable", "StoredProxyHealth", "Superseded", "TargetBusy", "accepted",
    "busy_message", "candidates",
    "carried_over", "existing_store", "metadata", "new_engine", "reviews", "schema_state", "shown_url",
    "unavailable", "unreachable", "upgrade_schema",
]
