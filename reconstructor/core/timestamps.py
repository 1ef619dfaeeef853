"""RFC 3339 date-times (section 5.6): the one text form of a time the contract accepts.

``ts``, every timestamp column, ``replay --from-timestamp`` and ``asof --at`` take exactly the
forms the section's grammar allows, read by the same rules:

- ``T`` or ``t`` between date and time (or a space, which section 5.6's note allows);
- any number of fraction digits, truncated to the microsecond (the tables hold microseconds);
- ``Z``, ``z`` or a numeric offset ``+hh:mm``/``-hh:mm`` (hours 00-23, minutes 00-59; ``-00:00``
  is UTC);
- a leap second (second ``60``) is the first second of the next minute: ``23:59:60.5Z`` is
  ``00:00:00.5Z`` of the next day, the instant POSIX time gives it.

Anything else (a time without a date, a date alone, a date-time without an offset, digits that are
not ASCII, a trailing newline) is not a time.  ``reconstructor.spark.timestamps`` is the same
reading as a Spark SQL expression; a property test holds the two together.
"""

from __future__ import annotations

import datetime as dt
import re

__all__ = ["RFC3339_PATTERN", "from_epoch_micros", "from_epoch_millis", "parse_rfc3339"]

#: The grammar's shape; field ranges are checked on the parts.  Groups: date, hour, minute,
#: second, fraction digits, offset.
RFC3339_PATTERN = (r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                   r"(?:\.([0-9]+))?([Zz]|[+-][0-9]{2}:[0-9]{2})")
_RFC3339 = re.compile(RFC3339_PATTERN)


def parse_rfc3339(text: str) -> dt.datetime:
    """The instant ``text`` names, as an aware UTC datetime truncated to the microsecond.

    Raises ``ValueError`` for anything that is not an RFC 3339 date-time, or one Python's
    datetime cannot hold (before year 1 or after 9999 once the offset is applied).
    """
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp (such as 2026-11-20T08:00:00Z)")
    date, hour, minute, second, fraction, offset = m.groups()
    hour, minute, second = int(hour), int(minute), int(second)
    if hour > 23 or minute > 59 or second > 60:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp: time of day out of range")
    micros = int(((fraction or "") + "000000")[:6])
    try:
        local = dt.datetime.combine(dt.date.fromisoformat(date),
                                    dt.time(hour, minute, min(second, 59), micros), dt.UTC)
        if second == 60:
            local += dt.timedelta(seconds=1)
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp: no such day") from None
    if offset in ("Z", "z"):
        return local
    off_h, off_m = int(offset[1:3]), int(offset[4:6])
    if off_h > 23 or off_m > 59:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp: offset out of range")
    shift = dt.timedelta(hours=off_h, minutes=off_m)
    try:
        return local - shift if offset[0] == "+" else local + shift
    except OverflowError:
        raise ValueError(f"{text!r} is outside the times Python can hold") from None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def from_epoch_micros(micros: int) -> dt.datetime:
    """Epoch microseconds (the state's and a session record's times) as an aware UTC datetime."""
    return _EPOCH + dt.timedelta(microseconds=int(micros))


def from_epoch_millis(ms: int) -> dt.datetime:
    """Epoch milliseconds (a Kafka timestamp) as an aware UTC datetime, exactly; one past what
    Python holds is its first or last time (the parse refuses either as outside the range)."""
    try:
        return _EPOCH + dt.timedelta(milliseconds=int(ms))
    except OverflowError:
        return dt.datetime.max.replace(tzinfo=dt.UTC) if ms > 0 else dt.datetime.min.replace(tzinfo=dt.UTC)
