"""Links in page text or attributes, resolved against the page's URL (or its ``<base href>``).

A ``url`` value is absolute, ``http`` or ``https``, with a lower-case scheme and host and no default port:
``/p/42?ref=a`` on ``https://Shop.example:443/list`` is ``https://shop.example/p/42?ref=a``. Text that is
not a link (``Read more``, ``4/5``) and links that lead nowhere on the web (``javascript:``, ``mailto:``)
are refused, never turned into an address.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit, urlunsplit

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
_RELATIVE_START = ("/", "./", "../", "?", "#")
# a bare relative path: segments of URL characters, at least one letter, and a "/" or a file extension
_SEGMENT = r"[\w.~%!$&'()*+,;=:@-]"
_BARE_PATH = re.compile(rf"^(?=[^?#]*[A-Za-z]){_SEGMENT}+(?:/{_SEGMENT}*)*(?:\?\S*)?(?:#\S*)?$")
_FILE = re.compile(r"\.[A-Za-z0-9]{2,5}(?:[?#]|$)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlParseError(ValueError):
    pass


def parse_url(text: str, base_url: str | None) -> str:
    """``text`` as an absolute web address, resolved against ``base_url``."""
    text = text.strip()
    if not text or any(c.isspace() for c in text):
        raise UrlParseError(f"{text!r} is not a link")
    absolute = text.startswith("//") or _SCHEME.match(text) is not None
    if not absolute:
        bare = _BARE_PATH.match(text) is not None and ("/" in text or _FILE.search(text) is not None)
        if not (text.startswith(_RELATIVE_START) or bare):
            raise UrlParseError(f"{text!r} is not a link")
        if not base_url:
            raise UrlParseError(f"relative link {text!r} and no page URL to resolve it against")
    try:
        # urljoin splits both: a malformed host ("https://[::ffff:192.168.0.1") raises there
        parts = urlsplit(urljoin(base_url or "", text))
        port = parts.port
    except ValueError as exc:
        raise UrlParseError(f"{text!r} is not a valid link ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise UrlParseError(f"{text!r} is not a web address (http or https)")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"  # IPv6
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (f"{userinfo}@" if userinfo else "") + host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, parts.fragment))


def page_base(page_url: str | None, base_href: str | None) -> str | None:
    """The URL relative links of a page resolve against: its ``<base href>`` (resolved), else its URL. A
    ``<base href>`` that is no valid address is ignored, as a browser ignores it."""
    if base_href and base_href.strip():
        try:
            return urljoin(page_url or "", base_href.strip()) or page_url
        except ValueError:
            return page_url
    return page_url
