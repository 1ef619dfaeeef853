"""Durations and triggers as operators write them ('90 seconds', '1h', 'available-now'), read once
at the edge into the one type each setting has."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, ClassVar

# The longest duration a setting takes.  Each becomes a wait or a date: a timer's or a sleep's
# wait ends at 292 years (nanoseconds in 64 bits), a date at the year 9999; a longer setting is a
# typo, refused where it is read rather than an OverflowError in a thread or in Spark.
LONGEST_DURATION = dt.timedelta(days=36500)


class Duration(dt.timedelta):
    """A ``timedelta`` read from text ('90 seconds', '30s', '1 hour', '2h', '1.5 days').

    It keeps the words it was given in, so that a message or ``config show`` echoes the value the
    way the operator wrote it."""

    __slots__ = ("text",)
    text: str
    _UNITS: ClassVar[dict[str, dt.timedelta]] = {
              "ms": dt.timedelta(milliseconds=1), "millisecond": dt.timedelta(milliseconds=1),
              "s": dt.timedelta(seconds=1), "sec": dt.timedelta(seconds=1),
              "second": dt.timedelta(seconds=1), "m": dt.timedelta(minutes=1),
              "min": dt.timedelta(minutes=1), "minute": dt.timedelta(minutes=1),
              "h": dt.timedelta(hours=1), "hour": dt.timedelta(hours=1),
              "d": dt.timedelta(days=1), "day": dt.timedelta(days=1)}

    def __new__(cls, text: str) -> Duration:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", text or "")
        # The unit as written first ("ms"), then without a plural "s" ("seconds", "mins").
        unit = m and next((u for u in (m.group(2).lower(), m.group(2).lower().removesuffix("s"))
                           if u in cls._UNITS), None)
        if m is None or unit is None:
            raise ValueError(f"not a duration: {text!r} (use e.g. '30 seconds', '10 minutes', '1 hour')")
        # Whole milliseconds, the finest unit the settings are used in.
        ms = float(m.group(1)) * (cls._UNITS[unit] / dt.timedelta(milliseconds=1))
        if ms > LONGEST_DURATION / dt.timedelta(milliseconds=1):
            raise ValueError(f"too long: {text!r} (at most {duration_text(LONGEST_DURATION)}, about 100 years)")
        self = super().__new__(cls, milliseconds=int(ms))
        self.text = text
        return self

    def __reduce__(self) -> tuple[type[Duration], tuple[str]]:  # copies rebuild it from its text
        return (Duration, (self.text,))

    def __str__(self) -> str:
        return self.text


def milliseconds(value: dt.timedelta) -> int:
    """A duration in whole milliseconds, as Spark and the stateful step take it."""
    return value // dt.timedelta(milliseconds=1)


def duration_text(value: dt.timedelta) -> str:
    """A duration as words: as the operator wrote it, else in its largest whole unit ('7 days')."""
    if isinstance(value, Duration):
        return value.text
    for unit, size in (("day", dt.timedelta(days=1)), ("hour", dt.timedelta(hours=1)),
                       ("minute", dt.timedelta(minutes=1)), ("second", dt.timedelta(seconds=1)),
                       ("millisecond", dt.timedelta(milliseconds=1))):
        if value % size == dt.timedelta(0) and value:
            count = value // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return "0 seconds"


class Trigger:
    """When the query runs a micro-batch: ``available-now`` (what is in Kafka, then stop), ``once``
    (one batch, then stop) or an interval (continuously).  The one place a trigger's text is read."""

    __slots__ = ("interval", "text")
    #: The names a trigger that is not an interval goes by; the first of each is how it is shown.
    NAMES: ClassVar[dict[str, str]] = {"available-now": "available-now", "availableNow": "available-now",
                                       "once": "once"}

    def __init__(self, text: str):
        self.text = text
        #: The interval of a continuous run; None when the run ends once caught up.
        self.interval: Duration | None = None if text in self.NAMES else Duration(text)

    @property
    def available_now(self) -> bool:
        return self.NAMES.get(self.text) == "available-now"

    @property
    def once(self) -> bool:
        return self.text == "once"

    @property
    def continuous(self) -> bool:
        return self.interval is not None

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Trigger):
            return (self.interval, self.NAMES.get(self.text)) == (other.interval, other.NAMES.get(other.text))
        if isinstance(other, str):
            return self == Trigger(other) if other in self.NAMES else False
        return self.interval is not None and self.interval == other

    def __hash__(self) -> int:
        return hash((self.interval, self.NAMES.get(self.text)))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Trigger({self.text!r})"


AVAILABLE_NOW = Trigger("available-now")

# Delta's own floor for VACUUM: a shorter retention may delete files that a reader or a concurrent
# writer still needs.  The default, and below it only with unsafe_vacuum_retention.
SAFE_VACUUM_RETENTION = Duration("168 hours")
