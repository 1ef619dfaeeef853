"""RFC 3339 date-times: every form section 5.6 allows is its instant, to the microsecond; nothing
else is a time."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconstructor.core.timestamps import from_epoch_micros, from_epoch_millis, parse_rfc3339

UTC = dt.UTC


def _at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize("text, instant", [
    ("2026-11-20T08:00:00Z", _at(2026, 11, 20, 8)),
    ("2026-11-20t08:00:00.123456789z", _at(2026, 11, 20, 8, 0, 0, 123456)),
    ("2026-11-20T08:00:00.1Z", _at(2026, 11, 20, 8, 0, 0, 100000)),
    ("2026-11-20T08:00:00.000000999999999999Z", _at(2026, 11, 20, 8)),
    ("2026-11-20T13:30:00+05:30", _at(2026, 11, 20, 8)),
    ("2026-11-20T05:00:00-03:00", _at(2026, 11, 20, 8)),
    ("2026-11-20T08:00:00-00:00", _at(2026, 11, 20, 8)),
    ("2026-11-21T07:59:00+23:59", _at(2026, 11, 20, 8)),
    ("2026-11-20 08:00:00Z", _at(2026, 11, 20, 8)),
    ("2024-02-29T00:00:00Z", _at(2024, 2, 29)),
    # A leap second is the first second of the next minute.
    ("2016-12-31T23:59:60Z", _at(2017, 1, 1)),
    ("2016-12-31T23:59:60.5Z", _at(2017, 1, 1, 0, 0, 0, 500000)),
    ("2016-12-31T18:59:60-05:00", _at(2017, 1, 1)),
])
def test_every_form_is_its_instant(text, instant):
    assert parse_rfc3339(text) == instant


@pytest.mark.parametrize("text", [
    "10:30:00", "2026-11-20", "2026-11-20T10:30:00", "2026-11-20T10:30Z", "2026-11-20T10:30:00.Z",
    "2026-11-20T10:30:00+0530", "2026-11-20T10:30:00+05", "2026-11-20T10:30:00 Z", "2026-11-20T10:30:00Z\n",
    " 2026-11-20T10:30:00Z", "2026-11-20T24:00:00Z", "2026-11-20T10:60:00Z", "2026-11-20T10:30:61Z",
    "2026-11-20T10:30:00+24:00", "2026-11-20T10:30:00+05:60", "2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
    "2026-00-10T00:00:00Z", "2026-11-00T00:00:00Z", "２０２６-11-20T10:30:00Z", "\u0662026-11-20T10:30:00Z",  # noqa: RUF001 - digits that are not ASCII
    "20261120T103000Z", "2026-W47-5T10:30:00Z", "+2026-11-20T10:30:00Z", "2026-11-20T10:30:00,5Z",
    "0000-01-01T00:00:00Z", "",
])
def test_anything_else_is_not_a_time(text):
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_rfc3339(text)


def test_a_time_past_what_python_holds_is_refused_not_an_overflow():
    with pytest.raises(ValueError):
        parse_rfc3339("9999-12-31T23:59:59-23:59")


@st.composite
def written(draw):
    """An instant and one of the ways RFC 3339 writes it."""
    local = draw(st.datetimes(min_value=dt.datetime(1700, 1, 2), max_value=dt.datetime(2200, 12, 30)))
    offset_min = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    digits = draw(st.integers(0, 12))
    extra = draw(st.text("0123456789", min_size=max(0, digits - 6), max_size=max(0, digits - 6)))
    sep = draw(st.sampled_from("Tt "))
    fraction = "" if digits == 0 else "." + f"{local.microsecond:06d}"[:digits] + extra
    if offset_min == 0 and draw(st.booleans()):
        zone = draw(st.sampled_from(["Z", "z", "+00:00", "-00:00"]))
    else:
        sign = "-" if offset_min < 0 else "+"
        zone = f"{sign}{abs(offset_min) // 60:02d}:{abs(offset_min) % 60:02d}"
    text = local.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + fraction
    kept = int((f"{local.microsecond:06d}"[:digits] + "000000")[:6])
    instant = (local.replace(microsecond=kept, tzinfo=UTC) - dt.timedelta(minutes=offset_min))
    return text + zone, instant


@given(written())
def test_property_each_written_form_reads_back_its_instant(case):
    text, instant = case
    assert parse_rfc3339(text) == instant
    assert parse_rfc3339(text).tzinfo == UTC


def test_epoch_numbers_are_aware_utc_times_exactly_and_a_kafka_time_past_python_is_its_last():
    assert from_epoch_micros(1_764_324_000_123_456) == dt.datetime(2025, 11, 28, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert from_epoch_millis(-1) == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    assert from_epoch_millis(2**63 - 1) == dt.datetime.max.replace(tzinfo=dt.UTC)
    assert from_epoch_millis(-(2**63)) == dt.datetime.min.replace(tzinfo=dt.UTC)


def test_the_spark_sql_of_a_time_maps_no_letter_case():
    """Spark's case mapping (``upper``, ``lower``, ``initcap``) builds ICU's title-case table over
    every code point the first time a JVM uses it: over a second of a run's first batch.  The SQL
    that reads a time (the parse's, for every update) takes ``Z`` or ``z`` as they are."""
    from reconstructor.spark.timestamps import rfc3339_timestamp

    sql = rfc3339_timestamp("t")
    assert "IN ('Z', 'z')" in sql
    assert not re.search(r"\b(upper|lower|ucase|lcase|initcap)\s*\(", sql, re.IGNORECASE), sql
