"""Dates and date-times in page text or attributes, normalised to ISO 8601.

Read: ISO 8601 (``2024-03-05``, ``2024-03-05T14:30:00+01:00``, the usual content of ``<time datetime>`` and
``<meta content>``), ``2024/03/05``, day-first dotted ``05.03.2024``, month names in English, German,
French and Spanish (``March 5, 2024``, ``5 Mar 2024``, ``5. März 2024``, ``1er janvier 2024``,
``5 de marzo de 2024``), optionally followed by a time (``14:30``, ``2:30 pm``) and an offset (``Z``,
``+01:00``, ``UTC``). ``05/03/2024`` is read only when one part is over 12: March 5th and May 3rd are both
possible, and a guessed date is a wrong value. A text holding two different dates is refused for the same
reason.

A ``date`` is ``YYYY-MM-DD``; a ``datetime`` is ``YYYY-MM-DDTHH:MM:SS`` plus the offset when the page gives
one (``Z`` becomes ``+00:00``). A ``datetime`` field needs a time of day: midnight would be invented.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

_MONTH_NAMES = {
    1: "january jan januar janv janvier enero ene",
    2: "february feb februar fevrier février févr fevr febrero",
    3: "march mar märz maerz marz mars marzo",
    4: "april apr avril avr abril abr",
    5: "may mai mayo",
    6: "june jun juni juin junio",
    7: "july jul juli juillet juil julio",
    8: "august aug août aout agosto ago",
    9: "september sep sept septembre septiembre setiembre",
    10: "october oct oktober okt octobre octubre",
    11: "november nov novembre noviembre",
    12: "december dec dezember dez décembre decembre déc diciembre dic",
}
MONTHS = {name: number for number, names in _MONTH_NAMES.items() for name in names.split()}
_MONTH = "(" + "|".join(sorted(map(re.escape, MONTHS), key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th|er|\.|º)?"
_YEAR = r"(\d{4})"
_TIME = (r"(?:\s*(?:,|T|at|um|à|a las|-)?\s*(\d{1,2})[:h](\d{2})(?::(\d{2})(?:[.,]\d+)?)?"
         r"\s*([ap]\.?m\.?)?(?:\s*(Z|UTC|GMT|[+-]\d{2}:?\d{2}))?)?")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (order, re.compile(rf"(?<![\w.]){body}{_TIME}(?![\w])", re.IGNORECASE))
    for order, body in (
        ("ymd", r"(\d{4})-(\d{2})-(\d{2})"),
        ("ymd", r"(\d{4})/(\d{1,2})/(\d{1,2})"),
        ("dmy", r"(\d{1,2})\.(\d{1,2})\.(\d{4})"),
        ("either", r"(\d{1,2})/(\d{1,2})/(\d{4})"),
        ("d_name_y", rf"{_DAY}\s*(?:de\s+)?{_MONTH}\s*,?\s*(?:de\s+)?{_YEAR}"),
        ("name_d_y", rf"{_MONTH}\s+{_DAY}\s*,?\s+{_YEAR}"),
    )
)


class DateParseError(ValueError):
    pass


@dataclass(frozen=True)
class _Found:
    date: dt.date
    time: dt.time | None


def parse_date(text: str) -> str:
    """The one date ``text`` states, as ``YYYY-MM-DD``."""
    return _one(text).date.isoformat()


def parse_datetime(text: str) -> str:
    """The one date and time ``text`` states, as ``YYYY-MM-DDTHH:MM:SS[+HH:MM]``."""
    found = _one(text)
    if found.time is None:
        raise DateParseError(f"{text!r} has a date but no time of day")
    return dt.datetime.combine(found.date, found.time).isoformat()


def without_dates(text: str) -> str:
    """``text`` with every date (and its time of day) it states cut out: the words around a date in a
    sentence ("Last updated on 5 March 2024." -> "Last updated on ."), which say what the date is."""
    spans = sorted(match.span() for _, match in _matches(text))
    out, at = [], 0
    for start, end in spans:
        out.append(text[at:start])
        at = end
    return " ".join(part.strip() for part in [*out, text[at:]] if part.strip())


def _matches(text: str) -> list[tuple[str, re.Match[str]]]:
    """(order, match) of each date in ``text``; "2024-03-05" is not also read as some other format."""
    found: list[tuple[str, re.Match[str]]] = []
    for order, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if not any(m.start() < match.end() and match.start() < m.end() for _, m in found):
                found.append((order, match))
    return found


def _one(text: str) -> _Found:
    found: list[_Found] = []
    problems: list[str] = []
    for order, match in _matches(text):
        try:
            found.append(_read(order, match))
        except DateParseError as exc:
            problems.append(str(exc))
    distinct = {(f.date, f.time) for f in found}
    if problems:
        raise DateParseError(problems[0])
    if not distinct:
        raise DateParseError(f"no date in {text!r}")
    if len(distinct) > 1:
        raise DateParseError(f"{text!r} states more than one date")
    return found[0]


def _read(order: str, match: re.Match[str]) -> _Found:
    groups = match.groups()
    a, b, c = groups[:3]
    if order == "ymd":
        year, month, day = int(a), int(b), int(c)
    elif order == "dmy":
        day, month, year = int(a), int(b), int(c)
    elif order == "either":
        first, second, year = int(a), int(b), int(c)
        if first <= 12 and second <= 12 and first != second:
            raise DateParseError(f"{match.group(0)!r} could be day/month or month/day; add a pattern or "
                                 "read an ISO date (a datetime attribute) instead")
        day, month = (first, second) if first > 12 else (second, first)
    elif order == "d_name_y":
        day, month, year = int(a), MONTHS[b.lower()], int(c)
    else:
        month, day, year = MONTHS[a.lower()], int(b), int(c)
    try:
        date = dt.date(year, month, day)
    except ValueError:
        raise DateParseError(f"{match.group(0)!r} is not a calendar date") from None
    return _Found(date, _time(match.group(0), groups[3:]))


def _time(whole: str, groups: tuple[str | None, ...]) -> dt.time | None:
    hour, minute, second, meridiem, offset = groups
    if hour is None:
        return None
    h, m, s = int(hour), int(minute), int(second or 0)
    if meridiem:
        if not 1 <= h <= 12:
            raise DateParseError(f"{whole!r} is not a time of day")
        h = h % 12 + (12 if meridiem.lower().startswith("p") else 0)
    if h > 23 or m > 59 or s > 59:
        raise DateParseError(f"{whole!r} is not a time of day")
    return dt.time(h, m, s, tzinfo=_offset(offset))


def _offset(text: str | None) -> dt.tzinfo | None:
    if text is None:
        return None
    if text.upper() in ("Z", "UTC", "GMT"):
        return dt.timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:])
    if minutes >= 24 * 60:
        raise DateParseError(f"{text!r} is not a UTC offset")
    return dt.timezone(sign * dt.timedelta(minutes=minutes))

