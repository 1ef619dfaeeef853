"""Where ``replay --from-timestamp`` starts: the Kafka timestamp it looks up, and the offsets a
lookup gives (no broker: the lookup's result is Kafka's ``TopicPartition`` list)."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

import pytest

from reconstructor.cli.replay_plan import offsets_found, timestamp_ms
from reconstructor.errors import ReconstructorError

UTC = dt.UTC


class Found(NamedTuple):
    topic: str
    partition: int
    offset: int
    error: object = None


@pytest.mark.parametrize("when, ms", [
    (dt.datetime(1970, 1, 1, tzinfo=UTC), 0),
    (dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC), 1),  # inside a millisecond: the next one
    (dt.datetime(2026, 11, 27, 8, 0, tzinfo=UTC), 1_795_766_400_000),
    # Before 1970: -1, -2 and -3 are Kafka's latest, earliest and newest time, never a time.
    (dt.datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), 0),
    (dt.datetime(1969, 12, 31, 23, 59, 59, 998_000, tzinfo=UTC), 0),
    (dt.datetime(1969, 12, 31, 23, 59, 59, 997_000, tzinfo=UTC), 0),
    (dt.datetime(1, 1, 1, tzinfo=UTC), 0),
])
def test_a_time_is_looked_up_as_the_first_millisecond_at_or_after_it_and_never_before_1970(when, ms):
    assert timestamp_ms(when) == ms


def test_a_partition_with_no_record_after_the_time_starts_at_its_end():
    assert offsets_found([Found("s-1", 0, 42), Found("s-1", 1, -1), Found("s-2", 0, 0)]) == {
        "s-1": {"0": 42, "1": -1}, "s-2": {"0": 0}}


def test_a_partition_whose_lookup_failed_is_named_not_read_from_its_end():
    with pytest.raises(ReconstructorError, match="in s-1 partition 1: Broker: Not leader for partition"):
        offsets_found([Found("s-1", 0, 42), Found("s-1", 1, -1, "Broker: Not leader for partition")])
