"""``fetch.proxies`` and the consent cookies of ``fetch:``: their shapes and checks (no Dagster, no I/O).

A proxy's URL is written without credentials; the user name and password are read from the environment
variables the contract names, when the fetcher is made, so they are never in the YAML, the loaded contract
or anything printed from it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from scrape_contracts.contract.base import Strict

# socks5h:// is socks5:// as other clients spell "the proxy resolves the host name", which it always does here
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# RFC 6265 token characters for a cookie name; values without separators, quotes or control characters
_COOKIE_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_COOKIE_VALUE = re.compile(r"[!#$%&'()*+\-./0-9:<=>?@A-Z\[\]^_`a-z{|}~]*")


class ProxySettings(Strict):
    """One forward proxy of ``fetch.proxies``."""

    url: str = Field(description="http://host:port (https://: TLS to the proxy; socks5://: a SOCKS5 proxy); "
                                 "no credentials in it.")
    name: str | None = Field(None, max_length=64,
                             description="Shown in summaries and metadata (default: the URL, which holds no secret).")
    username_env: str | None = Field(None, description="Environment variable holding the proxy's user name.")
    password_env: str | None = Field(None, description="Environment variable holding the proxy's password.")

    @field_validator("url")
    @classmethod
    def _url_is_a_proxy(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 (raises on a malformed port)
        except ValueError as exc:
            raise ValueError(f"proxy URL is malformed ({exc})") from None
        if "@" in parts.netloc:
            # the URL as written is never repeated here: it holds the credentials
            raise ValueError("a proxy URL must not hold credentials (user:password@); name the environment "
                             "variables that hold them with username_env and password_env")
        if parts.scheme not in PROXY_SCHEMES or not parts.hostname:
            raise ValueError(f"proxy URL {value!r} must be http://host:port, https://host:port or "
                             "socks5://host:port")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"proxy URL {value!r} must be only scheme, host and port")
        return f"{'socks5' if parts.scheme == 'socks5h' else parts.scheme}://{parts.netloc}"

    @field_validator("username_env", "password_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> ProxySettings:
        if (self.username_env is None) != (self.password_env is None):
            raise ValueError(f"proxy {self.label}: set both username_env and password_env, or neither")
        return self

    @property
    def label(self) -> str:
        """The proxy's name wherever it is shown (never a credential)."""
        return self.name or self.url


def site_host_problem(host: str) -> str | None:
    """Why ``host`` is not a site host key (scheme://host[:port]), or None."""
    try:
        parts = urlsplit(host)
        parts.port  # noqa: B018
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc \
            or parts.path not in ("", "/") or parts.query:
        return f"fetch.host_cookies key {host!r} must be a site host: scheme://host[:port], e.g. https://shop.example"
    return None


def cookie_problem(where: str, cookies: dict[str, str]) -> str | None:
    for name, value in cookies.items():
        if not _COOKIE_NAME.fullmatch(name):
            return f"{where}: {name!r} is not a cookie name (letters, digits and !#$%&'*+-.^_`|~)"
        if not _COOKIE_VALUE.fullmatch(value):
            return f"{where}: the value of cookie {name!r} has a space, quote, comma, semicolon or backslash"
    return None
