"""Where state lives. One place reads the environment, so every entry point agrees."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrape_contracts.contract.safe_yaml import YamlLimits
    from scrape_contracts.engine.limits import Limits


def dagster_home() -> Path:
    """``DAGSTER_HOME`` when set; otherwise ``.dagster_home`` in the working directory."""
    return Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()


def db_url() -> str:
    """The project store: ``SCRAPE_CONTRACTS_DB_URL`` (PostgreSQL in production) or SQLite in DAGSTER_HOME."""
    return os.environ.get("SCRAPE_CONTRACTS_DB_URL") or f"sqlite:///{dagster_home() / 'scrape_contracts.db'}"


def artifacts_dir() -> Path:
    """The folder of the raw pages when they are kept in a folder (the default page storage)."""
    return Path(os.environ.get("SCRAPE_CONTRACTS_ARTIFACTS_DIR") or dagster_home() / "artifacts")


PAGES_IN_STORE = "store"  # the page storage that is the project store's own database


def page_storage() -> str:
    """Where raw pages live (``SCRAPE_CONTRACTS_PAGES``): a folder (default: ``artifacts_dir``), ``store`` (the
    project store's database, reached by every worker host) or an object store URL (``s3://bucket/prefix``)."""
    return os.environ.get("SCRAPE_CONTRACTS_PAGES") or str(artifacts_dir())


def max_connections() -> int | None:
    """Batched runs: requests in flight at once over all hosts (``fetch.concurrency`` limits each host); None
    when unset: every host's concurrency at once, at least 32 and at most 256 (``service.batch``)."""
    return _positive_int("SCRAPE_CONTRACTS_MAX_CONNECTIONS", 32) if os.environ.get("SCRAPE_CONTRACTS_MAX_CONNECTIONS") else None


def parse_workers() -> int:
    """Batched runs: processes that parse pages (0 parses in a thread of the run's own process)."""
    return _positive_int("SCRAPE_CONTRACTS_PARSE_WORKERS", os.cpu_count() or 1, allow_zero=True)


def chunks() -> int:
    """Batched runs: chunk steps a run's targets are split into (``SCRAPE_CONTRACTS_CHUNKS``; docs/scale.md). 1: one
    step, as on one machine; more: steps an executor may place on several worker processes or hosts."""
    return _positive_int("SCRAPE_CONTRACTS_CHUNKS", 1)


EXECUTORS = ("in_process", "celery")


def executor() -> str:
    """The executor of the batched jobs (``SCRAPE_CONTRACTS_EXECUTOR``): ``in_process`` (default) or ``celery``."""
    raw = (os.environ.get("SCRAPE_CONTRACTS_EXECUTOR") or "in_process").strip()
    if raw not in EXECUTORS:
        raise ValueError(f"SCRAPE_CONTRACTS_EXECUTOR={raw!r} must be one of {', '.join(EXECUTORS)}")
    return raw


def celery_broker() -> str | None:
    """The Celery broker of the batched jobs (``SCRAPE_CONTRACTS_CELERY_BROKER``, e.g.
    ``pyamqp://guest@rabbitmq:5672//``); None: dagster-celery's default (RabbitMQ on DAGSTER_CELERY_BROKER_HOST)."""
    return os.environ.get("SCRAPE_CONTRACTS_CELERY_BROKER") or None


def lease_seconds() -> float | None:
    """How long a target's lease lasts without renewal (``SCRAPE_CONTRACTS_LEASE_SECONDS``; docs/leases.md);
    None: derived from the contract's fetch deadline (``service.leases.duration_for``)."""
    raw = os.environ.get("SCRAPE_CONTRACTS_LEASE_SECONDS")
    return _positive_float("SCRAPE_CONTRACTS_LEASE_SECONDS", 0.0) if raw else None


def db_outage_seconds() -> float:
    """How long a process waits for a PostgreSQL project store that answered before and then went away
    (``SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS``; docs/multihost.md) before its work fails; keep it below the lease."""
    return _positive_float("SCRAPE_CONTRACTS_DB_OUTAGE_SECONDS", 60.0)


def engine_limits() -> Limits:
    """Bounds on regex, selector and heal work (``engine.limits``; docs/limits.md)."""
    from scrape_contracts.engine.limits import SETTINGS, Limits

    default = Limits()
    return Limits(
        regex_timeout_s=_positive_float(SETTINGS["regex_timeout_s"], default.regex_timeout_s),
        selector_max_cost=_positive_int(SETTINGS["selector_max_cost"], default.selector_max_cost),
        heal_timeout_s=_positive_float(SETTINGS["heal_timeout_s"], default.heal_timeout_s),
        heal_max_elements=_positive_int(SETTINGS["heal_max_elements"], default.heal_max_elements),
        list_max_items=_positive_int(SETTINGS["list_max_items"], default.list_max_items),
    )


def _positive_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number; unset it or set e.g. {name}={default}") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r} must be more than 0")
    return value


def retention_days() -> float:
    """Raw pages of accepted and quarantined versions are kept this many days (``retention_job``)."""
    return _positive_float("SCRAPE_CONTRACTS_RETENTION_DAYS", 30.0)


def retention_keep_last() -> bool:
    """Keep each target's newest accepted page whatever its age (``SCRAPE_CONTRACTS_RETENTION_KEEP_LAST``)."""
    raw = (os.environ.get("SCRAPE_CONTRACTS_RETENTION_KEEP_LAST") or "true").strip().lower()
    if raw not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"SCRAPE_CONTRACTS_RETENTION_KEEP_LAST={raw!r} must be true or false")
    return raw in ("true", "1", "yes")


def metadata_max_chars() -> int:
    """Longest string kept in Dagster event metadata (``SCRAPE_CONTRACTS_METADATA_MAX_CHARS``)."""
    return _positive_int("SCRAPE_CONTRACTS_METADATA_MAX_CHARS", 2000)


def yaml_limits() -> YamlLimits:
    """Contract files: ``SCRAPE_CONTRACTS_YAML_MAX_BYTES`` and ``SCRAPE_CONTRACTS_YAML_MAX_NODES``."""
    from scrape_contracts.contract.safe_yaml import YamlLimits

    default = YamlLimits()
    return YamlLimits(max_bytes=_positive_int("SCRAPE_CONTRACTS_YAML_MAX_BYTES", default.max_bytes),
                      max_nodes=_positive_int("SCRAPE_CONTRACTS_YAML_MAX_NODES", default.max_nodes))


def api_max_body_bytes() -> int:
    """Largest request body ``serve`` reads (``SCRAPE_CONTRACTS_API_MAX_BODY_BYTES``); larger ones get 413 unread."""
    return _positive_int("SCRAPE_CONTRACTS_API_MAX_BODY_BYTES", 4 * 1024 * 1024)


def api_max_header_bytes() -> int:
    """Largest request line plus headers ``serve`` and ``mcp --transport http`` accept
    (``SCRAPE_CONTRACTS_API_MAX_HEADER_BYTES``); larger ones get 400 and the connection is closed."""
    return _positive_int("SCRAPE_CONTRACTS_API_MAX_HEADER_BYTES", 16 * 1024)


def api_max_streams() -> int:
    """Event streams (``/events/stream``) one API process keeps open at once (``SCRAPE_CONTRACTS_API_MAX_STREAMS``);
    one more gets 429."""
    return _positive_int("SCRAPE_CONTRACTS_API_MAX_STREAMS", 500)


def _positive_int(name: str, default: int, *, allow_zero: bool = False) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a whole number; unset it or set e.g. {name}={default}") from None
    if value < (0 if allow_zero else 1):
        raise ValueError(f"{name}={raw!r} must be {'0 or more' if allow_zero else '1 or more'}")
    return value


def fixture_root() -> Path | None:
    """``SCRAPE_CONTRACTS_FIXTURE_ROOT``: a site snapshot every ``fixture`` contract reads instead of its
    ``fixture_dir``; also the one folder outside the project that fixture pages may come from."""
    raw = os.environ.get("SCRAPE_CONTRACTS_FIXTURE_ROOT")
    return Path(raw).resolve() if raw else None


def dagster_ui_url() -> str:
    """Where people open the Dagster UI: links in notifications point there (SCRAPE_CONTRACTS_DAGSTER_URL)."""
    return os.environ.get("SCRAPE_CONTRACTS_DAGSTER_URL", "http://127.0.0.1:3000").rstrip("/")


def provider_endpoint(environ: Mapping[str, str] | None = None) -> tuple[str, str] | str:
    """The hosted scraping provider's base URL and API token (``SCRAPE_CONTRACTS_PROVIDER_URL``,
    ``SCRAPE_CONTRACTS_PROVIDER_TOKEN``; docs/providers.md), or what is missing, in words for the operator.
    The token is a secret: callers keep it out of every message, log line and event."""
    env = os.environ if environ is None else environ
    url = (env.get("SCRAPE_CONTRACTS_PROVIDER_URL") or "").strip().rstrip("/")
    token = (env.get("SCRAPE_CONTRACTS_PROVIDER_TOKEN") or "").strip()
    missing = [name for name, value in (("SCRAPE_CONTRACTS_PROVIDER_URL", url),
                                        ("SCRAPE_CONTRACTS_PROVIDER_TOKEN", token)) if not value]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        return (f"{' and '.join(missing)} {verb} not set (set the provider's base URL and API token where "
                "the code location and its runs execute)")
    if not url.startswith(("http://", "https://")):
        return "SCRAPE_CONTRACTS_PROVIDER_URL must be an http:// or https:// URL"
    return url, token
