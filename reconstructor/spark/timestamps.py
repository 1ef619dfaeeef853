"""RFC 3339 text to a Spark TIMESTAMP, by the rules of ``reconstructor.core.timestamps``.

Spark's own string-to-timestamp cast is more lenient than the contract (a time of day alone takes
today's date, a date-time without an offset takes the session's time zone) and stricter in places
(no lower-case ``t``/``z``, offsets only up to 18 hours, no leap second).  So the text is first
matched against the grammar, then its local date-time is cast as UTC and its offset and leap
second are applied as microseconds: the result never depends on the session's time zone or date.
"""

from __future__ import annotations

from reconstructor.core.timestamps import RFC3339_PATTERN

__all__ = ["rfc3339_timestamp"]


def _literal(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ``\z``: Java's ``$`` also matches before a final line terminator.
_MATCHES = _literal(f"^(?:{RFC3339_PATTERN})\\z")
_FRACTION = _literal(r"^.{19}(\.[0-9]+)")


def rfc3339_timestamp(text: str) -> str:
    """SQL: the TIMESTAMP the string expression ``text`` names, NULL when it is not RFC 3339.

    ``text`` is repeated in the result: pass a column or a cheap expression.
    """
    t = f"({text})"
    leap = f"substr({t}, 18, 2) = '60'"
    local = (f"try_cast(concat(substr({t}, 1, 10), 'T', substr({t}, 12, 6), "
             f"CASE WHEN {leap} THEN '59' ELSE substr({t}, 18, 2) END, "
             f"substr(regexp_extract({t}, {_FRACTION}, 1), 1, 7), 'Z') AS TIMESTAMP)")
    # Not ``upper(...)``: Spark's ICU case mapping builds a table over every code point when it is
    # first used in a JVM, about a second of a first batch.
    zulu = f"right({t}, 1) IN ('Z', 'z')"
    offset_us = (f"CASE WHEN {zulu} THEN 0 ELSE "
                 f"(CASE WHEN substr({t}, -6, 1) = '+' THEN 1 ELSE -1 END) "
                 f"* (CAST(substr({t}, -5, 2) AS BIGINT) * 3600 + CAST(substr({t}, -2, 2) AS BIGINT) * 60) "
                 f"* 1000000 END")
    offset_ok = f"({zulu} OR (substr({t}, -5, 2) <= '23' AND substr({t}, -2, 2) <= '59'))"
    return (f"CASE WHEN {t} RLIKE {_MATCHES} AND {offset_ok} THEN timestamp_micros("
            f"unix_micros({local}) + CASE WHEN {leap} THEN 1000000 ELSE 0 END - {offset_us}) END")
