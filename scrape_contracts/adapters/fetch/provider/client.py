"""The job protocol of a hosted scraping provider, as one small blocking client (docs/providers.md).

``submit`` → job id and cost; ``status`` → queued | running | done | failed (with Retry-After while it runs);
``result`` → the page the provider fetched; optionally ``request_repair`` → repair id and cost, and
``repair_status`` → the provider's proposal (field → selector) for fields healing refused. What matters most is telling apart a submit that never reached the
provider (``NotSent``: safe to try again) from one whose answer was lost (``Unanswered``: the provider may
have created and charged a job): only the first may be retried without a person.

Every connection is new (no keep-alive): a kept-alive connection the provider had closed fails like a lost
answer, and would make a target indeterminate for nothing. The token goes in the Authorization header only;
no message built here contains it or the URL's credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.urls import redact_url


class ProviderError(Exception):
    """The provider answered with a refusal, or not in its protocol. ``status``: its HTTP status (if any)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotSent(ProviderError):
    """The request never reached the provider (no connection): nothing was created."""


class Unanswered(ProviderError):
    """The request went out and no answer came back (timed out, connection closed): it may have been done."""


@dataclass(frozen=True)
class Submitted:
    job_id: str
    cost: float | None


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str  # queued | running | done | failed
    cost: float | None
    error: str | None
    retry_after_s: float | None
    url: str | None = None  # the page the job fetches, when the provider says

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")


@dataclass(frozen=True)
class JobResult:
    url: str
    status: int
    headers: dict[str, str]
    body: str
    encoding: str | None


@dataclass(frozen=True)
class RepairStatus:
    """A repair the provider was asked for: queued | running | done | failed; a done one's proposal."""

    repair_id: str
    state: str
    cost: float | None
    error: str | None
    retry_after_s: float | None
    selectors: dict[str, str]  # field → the selector the provider proposes
    values: dict[str, Any]  # field → the value it says that selector reads

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")


class ProviderClient:
    def __init__(self, base_url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.shown = redact_url(self.base_url)
        self._client = httpx.Client(
            base_url=self.base_url, timeout=httpx.Timeout(timeout_s), trust_env=False, follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "scrape-contracts/0.1"})

    def __repr__(self) -> str:
        return f"ProviderClient({self.shown!r})"  # never the token

    def close(self) -> None:
        self._client.close()

    def submit(self, url: str, label: str) -> Submitted:
        body = self._call("POST", "/v1/jobs", json={"url": url, "label": label}, what="submitting a job")
        job_id = body.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            # an answer without a job id: the provider says what it did, and it did not give a job
            raise ProviderError(f"the provider at {self.shown} answered the submit without a job id")
        return Submitted(job_id, _cost(body.get("cost")))

    def status(self, job_id: str) -> JobStatus:
        response, body = self._exchange("GET", f"/v1/jobs/{job_id}", what=f"polling job {job_id}")
        state = body.get("status")
        if state not in ("queued", "running", "done", "failed"):
            raise ProviderError(f"the provider at {self.shown} answered job {job_id}'s status with {state!r}")
        error = body.get("error")
        url = body.get("url")
        return JobStatus(job_id, state, _cost(body.get("cost")), str(error) if error else None,
                         _seconds(response.headers.get("retry-after")), url if isinstance(url, str) else None)

    def result(self, job_id: str) -> JobResult:
        body = self._call("GET", f"/v1/jobs/{job_id}/result", what=f"downloading job {job_id}'s result")
        try:
            return JobResult(str(body["url"]), int(body["status"]), dict(body.get("headers") or {}),
                             str(body["body"]), body.get("encoding"))
        except (KeyError, TypeError, ValueError):
            raise ProviderError(f"the provider at {self.shown} sent job {job_id}'s result without url, "
                                "status and body") from None

    def request_repair(self, *, url: str, label: str, job_id: str | None,
                       fields: dict[str, dict[str, Any]]) -> Submitted:
        """Ask for a repair of ``fields`` (name → the failing selector and what the field holds) on the page
        of ``url`` (fetched by ``job_id``): the repair's id (in ``job_id``) and cost. A provider without repairs
        answers 404."""
        body = self._call("POST", "/v1/repairs", json={"url": url, "label": label, "job_id": job_id,
                                                      "fields": fields}, what="asking for a repair")
        repair_id = body.get("repair_id")
        if not isinstance(repair_id, str) or not repair_id:
            raise ProviderError(f"the provider at {self.shown} answered the repair request without a repair id")
        return Submitted(repair_id, _cost(body.get("cost")))

    def repair_status(self, repair_id: str) -> RepairStatus:
        response, body = self._exchange("GET", f"/v1/repairs/{repair_id}", what=f"polling repair {repair_id}")
        state = body.get("status")
        if state not in ("queued", "running", "done", "failed"):
            raise ProviderError(f"the provider at {self.shown} answered repair {repair_id}'s status with "
                                f"{state!r}")
        proposal = body.get("proposal") if isinstance(body.get("proposal"), dict) else {}
        selectors = {str(k): str(v) for k, v in (proposal.get("selectors") or {}).items()
                     if isinstance(v, str) and v.strip()}
        values = dict(proposal.get("values") or {}) if isinstance(proposal.get("values"), dict) else {}
        error = body.get("error")
        return RepairStatus(repair_id, state, _cost(body.get("cost")), str(error) if error else None,
                            _seconds(response.headers.get("retry-after")), selectors,
                            {k: v for k, v in values.items() if k in selectors})

    def _call(self, method: str, path: str, *, what: str, json: Any = None) -> dict[str, Any]:
        return self._exchange(method, path, what=what, json=json)[1]

    def _exchange(self, method: str, path: str, *, what: str,
                  json: Any = None) -> tuple[httpx.Response, dict]:
        try:
            response = self._client.request(method, path, json=json)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise NotSent(f"{what}: cannot reach the provider at {self.shown} "
                          f"({type(exc).__name__})") from None
        except httpx.TimeoutException as exc:
            raise Unanswered(f"{what}: no answer from the provider at {self.shown} within the timeout "
                             f"({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise Unanswered(f"{what}: the provider at {self.shown} closed the connection without an answer "
                             f"({type(exc).__name__})") from None
        if response.status_code == 401 or response.status_code == 403:
            raise ProviderError(f"{what}: the provider at {self.shown} refused the API token (HTTP "
                                f"{response.status_code}; check SCRAPE_CONTRACTS_PROVIDER_TOKEN)",
                                status=response.status_code)
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400 or not isinstance(body, dict):
            detail = body.get("error") if isinstance(body, dict) else None
            raise ProviderError(f"{what}: the provider at {self.shown} answered HTTP {response.status_code}"
                                + (f": {str(detail)[:200]}" if detail else ""), status=response.status_code)
        return response, body


def _cost(value: Any) -> float | None:
    try:
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None
