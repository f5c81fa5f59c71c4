"""Refuse fetches that would reach the machine itself, the local network or a cloud metadata endpoint.

A contract's URL (or a redirect chosen by a remote server) must not turn the scraper into a proxy for
internal services, so every hop is checked against the addresses its host name resolves to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

Resolver = Callable[[str], Sequence[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = ("http", "https")

# Metadata endpoints hand out cloud credentials; no scrape has a reason to read them, so they stay
# blocked even when a contract allows private addresses.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean... instance metadata
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.170.23",  # AWS EKS Pod Identity credentials
        "fd00:ec2::23",  # AWS EKS Pod Identity over IPv6
        "fd20:ce::254",  # GCP metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "168.63.129.16",  # Azure WireServer (a public-looking address that serves the VM's secrets)
    )
)
# IPv6 addresses that carry an IPv4 one a translator or tunnel may deliver to: NAT64 (RFC 6052) and the
# deprecated IPv4-compatible form; IPv4-mapped, 6to4 and Teredo have ipaddress attributes of their own
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

OPT_IN_HINT = "set `fetch.allow_private_addresses: true` in the contract if this target is intended"


class AddressBlocked(Exception):
    """The URL is not allowed; the message names the reason (never secrets)."""

    def __init__(self, message: str, *, opt_in_helps: bool = False) -> None:
        super().__init__(message)
        # whether `fetch.allow_private_addresses: true` would let this URL through
        self.opt_in_helps = opt_in_helps


class ResolutionFailed(Exception):
    """The host name did not resolve; usually a typo or a transient DNS problem."""


def system_resolver(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"could not resolve host {host!r}: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _parse_ip(text: str) -> IPAddress | None:
    # getaddrinfo reports link-local IPv6 with a zone ("fe80::1%eth0"), which ipaddress rejects.
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):  # not :: or ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def blocked_reason(ip: IPAddress, *, allow_private: bool) -> str | None:
    """Why ``ip`` must not be contacted, or None when it may be."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        reason = blocked_reason(embedded, allow_private=allow_private) if embedded is not None else None
        if reason:
            return f"{reason} inside an IPv6 address ({embedded})"
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if allow_private:
        return None
    for label, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return f"a {label} address"
    # Catches ranges that are neither private nor public, e.g. carrier-grade NAT 100.64.0.0/10.
    if not ip.is_global:
        return "a non-public address"
    return None


class AddressGuard:
    """``guard.check(url)`` raises AddressBlocked / ResolutionFailed, or returns when the URL may be fetched.

    ``allowed_hosts`` holds ``host:port`` pairs that skip the address check (the scheme check stays);
    tests use it to reach their own 127.0.0.1 server while every other hop is still checked.
    """

    def __init__(
        self,
        *,
        allow_private: bool = False,
        allowed_hosts: Iterable[str] = (),
        resolver: Resolver | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self._resolve = resolver or system_resolver

    def check(self, url: str) -> tuple[str, ...] | None:
        """The addresses checked, which are the only ones the fetch may connect to (DNS may answer
        differently next time); None when the host is a literal IP or an ``allowed_hosts`` entry."""
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise AddressBlocked(f"the URL is malformed ({exc})") from exc
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise AddressBlocked(f"scheme {scheme or '(none)'!r} is not allowed (only http and https)")
        host = (parts.hostname or "").lower()
        if not host:
            raise AddressBlocked("the URL has no host")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as exc:
            raise AddressBlocked(f"the URL has an invalid port ({exc})") from exc
        if f"{host}:{port}" in self.allowed_hosts:
            return None
        literal = _parse_ip(host)
        resolved = [(host, literal)] if literal is not None else self._resolved(host)
        for _, ip in resolved:
            reason = blocked_reason(ip, allow_private=self.allow_private)
            if reason:
                where = f"host {host!r} is" if literal is not None else f"host {host!r} resolves to {ip},"
                opt_in_helps = blocked_reason(ip, allow_private=True) is None
                raise AddressBlocked(f"{where} {reason}", opt_in_helps=opt_in_helps)
        return None if literal is not None else tuple(raw for raw, _ in resolved)

    def _resolved(self, host: str) -> list[tuple[str, IPAddress]]:
        """(address as resolved, keeping an IPv6 zone, parsed) pairs."""
        pairs = [(str(raw), _parse_ip(str(raw))) for raw in self._resolve(host)]
        addresses = [(raw, ip) for raw, ip in pairs if ip is not None]
        if not addresses:
            raise ResolutionFailed(f"host {host!r} did not resolve to any address")
        return addresses
