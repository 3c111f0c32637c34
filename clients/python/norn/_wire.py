"""Conversions between Python values and the API's wire formats: Go duration
strings ("10s", "1h30m") and RFC 3339 times."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Optional, Union

from .errors import InvalidArgument

Duration = Union[int, float, _dt.timedelta, str]
Time = Union[_dt.datetime, str]

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(s: str) -> float:
    """Seconds in a Go duration string ("1h2m3.5s", "250ms", "0s")."""
    if not isinstance(s, str):
        raise ValueError(f"duration must be a string, got {type(s).__name__}")
    text = s
    sign = 1
    if text[:1] in "+-" and text:
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"invalid duration {s!r}")
    pos = 0
    ns = 0.0
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError(f"invalid duration {s!r}")
        ns += float(m.group(1)) * _UNITS_NS[m.group(2)]
        pos = m.end()
    return sign * ns / 1e9


def format_duration(value: Duration, field: str) -> str:
    """A Go duration string for seconds (int or float), a timedelta, or a
    duration string (checked, passed through)."""
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            raise InvalidArgument(str(e), field=field) from None
        if seconds < 0:
            raise InvalidArgument(f"duration {value!r} is negative", field=field)
        return value
    if isinstance(value, bool):
        raise InvalidArgument("a duration is seconds (a number), a timedelta or a string like \"10s\"", field=field)
    if isinstance(value, _dt.timedelta):
        ns = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000
    elif isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidArgument(f"duration must be finite, got {value!r}", field=field)
        ns = int(round(value * 1_000_000_000))
    else:
        raise InvalidArgument(
            f"a duration is seconds (a number), a timedelta or a string like \"10s\", got {type(value).__name__}",
            field=field,
        )
    if ns < 0:
        raise InvalidArgument(f"duration must not be negative, got {value!r}", field=field)
    for unit, size in (("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


def format_time(value: Time, field: str) -> str:
    """RFC 3339 for a datetime (naive ones are taken as UTC) or a string
    (passed through; the server checks it)."""
    if isinstance(value, str):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    raise InvalidArgument(f"a time is a datetime or an RFC 3339 string, got {type(value).__name__}", field=field)


_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:\d{2})$"
)


def parse_time(s: Optional[str]) -> Optional[_dt.datetime]:
    """An aware datetime for an RFC 3339 string (nanoseconds are cut to
    microseconds); None for None, "" and Go's zero time."""
    if not s or s.startswith("0001-01-01T00:00:00"):
        return None
    m = _TIME.match(s)
    if not m:
        raise ValueError(f"invalid RFC 3339 time {s!r}")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    if tz in ("Z", "z"):
        tzinfo = _dt.timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = _dt.timezone(sign * _dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    return _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), micro, tzinfo=tzinfo)


def retry_policy(value: Any, field: str) -> dict:
    """The wire form of a retry policy given as a dict with max_retries,
    base and max (durations in any form format_duration takes)."""
    if not isinstance(value, dict):
        raise InvalidArgument("retry is a dict like {'max_retries': 5, 'base': 20, 'max': 3600}", field=field)
    out = dict(value)
    for key in ("base", "max"):
        if out.get(key) is not None:
            out[key] = format_duration(out[key], f"{field}.{key}")
    return out
