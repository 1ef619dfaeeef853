"""When a run's first compaction is due, from the output's last one (``core.compaction_schedule``)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from reconstructor.core.compaction_schedule import wait_before_compaction

T0 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def test_a_first_compaction_or_a_due_one_starts_at_once_and_one_not_due_waits_the_rest():
    assert wait_before_compaction(None, T0, HOUR) == dt.timedelta(0)
    assert wait_before_compaction(T0 - HOUR, T0, HOUR) == dt.timedelta(0)
    assert wait_before_compaction(T0 - 2 * HOUR, T0, HOUR) == dt.timedelta(0)
    assert wait_before_compaction(T0 - dt.timedelta(minutes=5), T0, HOUR) == dt.timedelta(minutes=55)


def test_a_last_compaction_ahead_of_this_clock_waits_one_interval_at_most():
    assert wait_before_compaction(T0 + dt.timedelta(days=3), T0, HOUR) == HOUR


@given(st.timedeltas(min_value=-dt.timedelta(days=30), max_value=dt.timedelta(days=30)),
       st.timedeltas(min_value=dt.timedelta(seconds=1), max_value=dt.timedelta(days=2)))
def test_no_run_waits_longer_than_an_interval_and_none_compacts_twice_within_one(since, every):
    """Whatever the clocks say: the wait is within [0, every], and a run that compacts at once
    found the last compaction at least ``every`` old (or ahead of its clock by no more than 0)."""
    wait = wait_before_compaction(T0 - since, T0, every)
    assert dt.timedelta(0) <= wait <= every
    if wait == dt.timedelta(0):
        assert since >= every
