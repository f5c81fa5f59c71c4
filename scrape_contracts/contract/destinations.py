"""``destinations.yaml``: the places events go, declared once beside the contracts.

::

    destinations:
      deals_webhook:
        type: webhook
        url: https://hooks.example.com/scrape-contracts
        secret: ${DEALS_WEBHOOK_SECRET}       # signs every body (HMAC-SHA256)
        # signing: standard-webhooks         # webhook-id/-timestamp/-signature; the secret is whsec_<base64>
      deals_slack:
        type: slack
        url: ${SLACK_WEBHOOK_URL}             # an incoming-webhook URL is a secret too
      ops_telegram:
        type: telegram
        bot_token: ${TELEGRAM_BOT_TOKEN}
        chat_id: "-1001234567890"

Every destination is delivered to through the same address guard as fetching (loopback, private and
link-local addresses refused after DNS, cloud metadata always); ``allow_private_addresses: true`` on one
destination lets it reach a receiver on this machine or the local network.

Secrets are written only as ``${ENV}`` references: the file can be committed. They are read from the
environment when a message is sent, so a missing variable fails that delivery with a message naming it
instead of breaking the code location. The names are checked when the contracts load (``unknown_names``):
a contract that notifies a destination not declared here does not load.
"""

from __future__ import annotations

import os
import re
from enum import Enum
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from scrape_contracts.contract import safe_yaml

if TYPE_CHECKING:
    from scrape_contracts.contract.model import Contract

FILE_NAME = "destinations.yaml"
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_ANY_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
# headers that carry a credential by their name; their value must come from the environment
_CREDENTIAL_HEADER = re.compile(r"auth|token|secret|key|cookie|passw|session|signature", re.IGNORECASE)
# a long run of token characters mixing letters and digits: what an API key or a bearer token looks like
_TOKEN_LIKE = re.compile(r"(?=[A-Za-z0-9+/_.=-]*[0-9])(?=[A-Za-z0-9+/_.=-]*[A-Za-z])[A-Za-z0-9+/_.=-]{20,}")
MAX_HEADER_VALUE = 4096


class DestinationError(ValueError):
    """A destination is declared wrongly, or a secret it needs is not set."""


def _env_only(value: str, what: str) -> str:
    if not _ENV_REF.match(value):
        raise ValueError(f"{what} must be an environment reference such as ${{MY_SECRET}}, not a literal value "
                         "(destinations.yaml is meant to be committed)")
    return value


def resolve(value: str) -> str:
    """A ``${ENV}`` reference's value now; plain strings as they are."""
    match = _ENV_REF.match(value)
    if not match:
        return value
    found = os.environ.get(match.group(1))
    if not found:
        raise DestinationError(f"environment variable {match.group(1)} is not set: export it where "
                               "dagster-daemon and the run workers run")
    return found


def _header_problem(name: str, value: str) -> str | None:
    """Why a destination header may not be declared so, or None."""
    if not _HEADER_NAME.match(name):
        return f"header name {name[:40]!r} is not a valid HTTP header name"
    if len(value) > MAX_HEADER_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"header {name!r}: a value is at most {MAX_HEADER_VALUE} characters, without control characters"
    literal = _ANY_ENV_REF.sub("", value)
    if _CREDENTIAL_HEADER.search(name) and literal == value:
        return (f"header {name!r} carries a credential: write it as an environment reference such as "
                f'"Bearer ${{MY_TOKEN}}", not a literal value (destinations.yaml is meant to be committed)')
    if _TOKEN_LIKE.search(literal):
        return (f"header {name!r} holds what looks like a literal secret: take it from the environment "
                "(${MY_TOKEN}) instead")
    return None


class _Destination(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = ""
    # a receiver on this machine or the local network (tests, a sidecar): the address guard lets it through
    allow_private_addresses: bool = False


class Signing(str, Enum):
    """How a webhook's requests are signed (``adapters/destinations/signing.py``)."""

    SCRAPE_CONTRACTS = "scrape-contracts"  # X-Scrape-Contracts-Signature: sha256=<hex> over timestamp.body
    STANDARD_WEBHOOKS = "standard-webhooks"  # the Standard Webhooks specification: webhook-signature: v1,<base64>


class WebhookDestination(_Destination):
    """A JSON POST to ``url``, signed with ``secret`` (see ``signing.py``)."""

    type: Literal["webhook"]
    url: str
    secret: str
    headers: dict[str, str] = Field(default_factory=dict)
    signing: Signing = Field(Signing.SCRAPE_CONTRACTS, description="scrape-contracts (default) or "
                             "standard-webhooks (then the secret is whsec_ followed by base64)")

    @field_validator("secret")
    @classmethod
    def _secret_from_env(cls, value: str) -> str:
        return _env_only(value, "secret")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith("${") and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"url must be an http(s) URL, not {value[:100]!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _headers_without_literal_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [p for p in (_header_problem(k, v) for k, v in value.items()) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value


class SlackDestination(_Destination):
    """A Slack incoming webhook."""

    type: Literal["slack"]
    url: str

    @field_validator("url")
    @classmethod
    def _url_from_env(cls, value: str) -> str:
        return _env_only(value, "a Slack webhook url")


class TelegramDestination(_Destination):
    """A Telegram bot's sendMessage to one chat, HTML parse mode."""

    type: Literal["telegram"]
    bot_token: str
    chat_id: str
    api_url: str = "https://api.telegram.org"

    @field_validator("bot_token")
    @classmethod
    def _token_from_env(cls, value: str) -> str:
        return _env_only(value, "bot_token")

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat_id_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _api_url_over_https(self) -> TelegramDestination:
        # the bot token travels in the path of every request to api_url: only over TLS, to a host that
        # names itself (http only for a stand-in receiver the destination explicitly allows on this machine)
        schemes = "https?" if self.allow_private_addresses else "https"
        if not re.match(rf"^{schemes}://[^\s/?#@]+/?$", self.api_url):
            raise ValueError(f"api_url must be an https:// URL of the Bot API's host, such as "
                             f"https://api.telegram.org, not {self.api_url[:100]!r} (http only with "
                             "allow_private_addresses: true, for a receiver on this machine)")
        return self


Destination = Annotated[WebhookDestination | SlackDestination | TelegramDestination, Field(discriminator="type")]
_ADAPTER: TypeAdapter[Destination] = TypeAdapter(Destination)
Destinations = dict[str, WebhookDestination | SlackDestination | TelegramDestination]


def parse_destinations(data: Any, source: str = FILE_NAME) -> Destinations:
    if data is None:
        return {}
    if not isinstance(data, dict) or set(data) != {"destinations"} or not isinstance(data["destinations"], dict):
        raise DestinationError(f"{source}: expected one top-level key `destinations:` mapping names to "
                               "destinations (type: webhook | slack | telegram)")
    found: Destinations = {}
    problems = []
    for name, spec in data["destinations"].items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            problems.append(f"{name!r}: a destination name is lowercase letters, digits and _")
            continue
        try:
            found[name] = _ADAPTER.validate_python({**(spec or {}), "name": name}
                                                   if isinstance(spec, dict) else spec)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"] if p not in ("webhook", "slack", "telegram"))
                problems.append(f"{name}{'.' + where if where else ''}: {error['msg']}")
    if problems:
        raise DestinationError(f"{source}: " + "; ".join(problems))
    return found


def load_destinations(contracts_dir: Path) -> Destinations:
    """The destinations declared beside the contracts; none when there is no such file."""
    path = Path(contracts_dir) / FILE_NAME
    if not path.exists():
        return {}
    try:
        data, _ = safe_yaml.load(safe_yaml.read_text(path))
    except Exception as exc:  # noqa: BLE001 (YAML errors of every kind become one line)
        raise DestinationError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_destinations(data, str(path))


def notified(contract: Contract) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(where in the YAML, destination name) of every name the contract notifies: its activations, its
    canary and its targets' canaries."""
    for i, rule in enumerate(contract.activations):
        for name in rule.notify:
            yield ("activations", i, "notify"), name
    for name in (contract.canary.notify or ()) if contract.canary is not None else ():
        yield ("canary", "notify"), name
    for i, target in enumerate(contract.static_targets):
        canary = getattr(target.canary, "notify", None)
        for name in canary or ():
            yield ("targets", i, "canary", "notify"), name


def unknown_names(contract: Contract, declared: Destinations) -> list[tuple[tuple[str | int, ...], str]]:
    """The references of ``notified`` to destinations ``declared`` does not have, with what to do."""
    if declared:
        known = f"destinations.yaml declares {', '.join(sorted(declared))}"
    else:
        known = (f"there is no {FILE_NAME} beside the contracts declaring any "
                 "(see docs/activations.md#destinations)")
    return [(where, f"unknown destination {name!r}: {known}") for where, name in notified(contract)
            if name not in declared]
