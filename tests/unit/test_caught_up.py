"""When a run may end before it builds its query (``core.caught_up``): only when Spark's own
available-now source would find nothing to read, and never on a doubt."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reconstructor.core.caught_up import caught_up, start_fingerprint

PARTITIONS = st.tuples(st.sampled_from(["s-0", "s-1", "s-2"]), st.integers(0, 2))
OFFSETS = st.dictionaries(PARTITIONS, st.integers(0, 50), max_size=6)


@given(OFFSETS, OFFSETS, st.integers(0, 3))
def test_a_run_is_caught_up_only_when_no_partition_has_a_record_past_where_the_last_batch_ended(
        ended_at, kafka_ends, batch):
    """Caught up means: every record Kafka holds on the matched partitions (read_committed) is
    before where the last committed batch ended, and no partition of that batch is gone."""
    readable = {tp: end - ended_at.get(tp, 0) for tp, end in kafka_ends.items()}
    nothing_to_read = all(n == 0 for n in readable.values()) and set(ended_at) <= set(kafka_ends)
    assert caught_up(batch, batch, ended_at, kafka_ends) == nothing_to_read


def test_a_batch_planned_and_not_committed_is_not_caught_up_whatever_kafka_holds():
    ends = {("s-0", 0): 7}
    assert caught_up(4, 4, ends, ends)
    assert not caught_up(5, 4, ends, ends)  # batch 5 runs again from the checkpoint
    assert not caught_up(None, None, None, ends)  # a new checkpoint
    assert not caught_up(0, None, None, {})


def test_a_partition_gone_or_moved_back_is_left_to_the_query():
    assert not caught_up(3, 3, {("s-0", 0): 7, ("s-1", 0): 2}, {("s-0", 0): 7})  # s-1 deleted
    assert not caught_up(3, 3, {("s-0", 0): 7}, {("s-0", 0): 5})  # recreated, or records deleted
    assert caught_up(3, 3, {("s-0", 0): 7}, {("s-0", 0): 7, ("s-2", 0): 0})  # a new, empty topic
    assert not caught_up(3, 3, {("s-0", 0): 7}, {("s-0", 0): 7, ("s-2", 0): 1})  # a new topic's record


def test_a_start_fingerprint_changes_with_any_setting_a_start_acts_on_and_not_with_their_order():
    base = {"engine": "python", "catalog": None, "row_schema": "`a` DOUBLE"}
    assert start_fingerprint(base) == start_fingerprint(dict(reversed(list(base.items()))))
    for key, value in [("engine", "jvm"), ("catalog", "main.sensors"), ("row_schema", "`a` DOUBLE, `b` INT")]:
        assert start_fingerprint({**base, key: value}) != start_fingerprint(base)
