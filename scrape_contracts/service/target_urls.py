"""Whether a URL may be a target: the checks every door applies (YAML, ``targets add``, a file, the API,
discovery), so a URL refused at one is refused at all of them."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from pydantic import ValidationError

from scrape_contracts.adapters.netguard import OPT_IN_HINT, blocked_reason
from scrape_contracts.contract.targets import Target, without_userinfo


def shown(url: str) -> str:
    """A URL as an error names it: no credentials, at most 100 characters."""
    return repr(without_userinfo(url[:100])) + ("..." if len(url) > 100 else "")


def checked_target(url: str, *, allow_private: bool = False) -> Target | str:
    """The target for ``url``, or why it cannot be one: not absolute http(s), too long, a user name or
    password in it, or a literal IP address the fetch guard would refuse (private, loopback, link-local,
    metadata) unless the contract allows private addresses (metadata addresses never)."""
    try:
        target = Target(url=url.strip())
    except ValidationError as exc:
        return exc.errors()[0]["msg"].removeprefix("Value error, ")
    return literal_address_problem(target.url, allow_private) or target


def literal_address_problem(url: str, allow_private: bool) -> str | None:
    host = urlsplit(url).hostname or ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            # the shorthand forms the resolver accepts too: 127.1, 0x7f.0.0.1, 2130706433
            ip = ipaddress.ip_address(socket.inet_aton(host))
        except (OSError, UnicodeError, ValueError):
            return None  # a host name: the fetch guard checks what it resolves to
    reason = blocked_reason(ip, allow_private=allow_private)
    if reason is None:
        return None
    hint = "" if reason == "a cloud metadata address" or allow_private else f"; {OPT_IN_HINT}"
    return f"{ip} is {reason}: such targets are not fetched{hint}"
