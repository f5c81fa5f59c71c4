"""Credentials in header values: ``${NAME}`` expansion from the environment, scrubbing from output."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Scrubber:
    """Replaces caller-supplied header values (and their long tokens) with ``***`` in text we emit."""

    def __init__(self, values: Iterable[str]) -> None:
        pieces: set[str] = set()
        for value in values:
            value = value.strip()
            # shorter values ("1", "en") are not secrets, and replacing them would mangle messages
            if len(value) >= 4:
                pieces.add(value)
            # servers often echo only the token part of "Bearer <token>" or one cookie of several
            pieces.update(token for token in re.split(r"[\s;,=]+", value) if len(token) >= 8)
        self._pieces = sorted(pieces, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for piece in self._pieces:
            text = text.replace(piece, "***")
        return text


@dataclass(frozen=True)
class ExpandedHeaders:
    # both hold secrets once expanded, so neither is in the repr
    headers: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)
    # (header name, variable name) of every reference that could not be expanded
    missing: tuple[tuple[str, str], ...] = ()
    empty: tuple[tuple[str, str], ...] = ()

    def problem(self) -> str | None:
        """What stops these headers from being sent, phrased for the contract's author; None when nothing."""

        def listing(pairs: tuple[tuple[str, str], ...]) -> str:
            return ", ".join(f"${{{variable}}} in header {header!r}" for header, variable in pairs)

        problems = []
        if self.missing:
            problems.append(f"environment variable not set: {listing(self.missing)}")
        if self.empty:
            problems.append(f"environment variable empty: {listing(self.empty)}")
        if not problems:
            return None
        return (
            "; ".join(problems)
            + " (set the variable where the code location and its runs execute, or remove the reference "
            "from fetch.headers in the contract)"
        )


def expand_header_values(
    headers: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> ExpandedHeaders:
    """Replace ``${NAME}`` in header values with environment variables; other ``$`` stay as written.

    Unset and empty variables are reported rather than expanded to "": a CI system hands an undefined
    secret over as an empty string, and "Bearer " would be sent as if it were a credential.
    """
    env = os.environ if environ is None else environ
    expanded: dict[str, str] = {}
    secrets: list[str] = []
    missing: list[tuple[str, str]] = []
    empty: list[tuple[str, str]] = []

    def substitute(header: str) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            value = env.get(name)
            if value is None:
                missing.append((header, name))
                return ""
            if not value:
                empty.append((header, name))
                return ""
            secrets.append(value)
            return value

        return replace

    for header, template in headers.items():
        expanded[header] = _ENV_REFERENCE.sub(substitute(header), template)
    return ExpandedHeaders(expanded, tuple(secrets), tuple(missing), tuple(empty))
