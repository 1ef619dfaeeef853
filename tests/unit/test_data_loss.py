"""DATA_LOSS: records never processed and gone from Kafka, told apart from a sensor that is done."""

from __future__ import annotations

import pytest

from reconstructor.core.data_loss import (
    find_data_loss,
    offsets_from_log,
    offsets_without,
    recreated_partitions,
    settle_recreated,
)
from reconstructor.core.violations import ViolationKind

T = "sensor-1"


def _never_asked(partitions):
    raise AssertionError(f"the tables were read for {list(partitions)}")


def _loss(start, end, earliest, open_sessions=_never_asked):
    return [(d.topic, d.partition, d.first, d.earliest) for d in
            find_data_loss(start, end, earliest, open_sessions)]


def test_a_batch_that_reads_on_from_where_the_last_one_ended_loses_nothing():
    start, end = {(T, 0): 10, (T, 1): 4}, {(T, 0): 20, (T, 1): 4}
    assert _loss(start, end, {(T, 0): 0, (T, 1): 4}) == []


def test_records_aged_out_or_deleted_before_they_were_read_are_lost_up_to_the_earliest_still_there():
    found = find_data_loss({(T, 0): 10}, {(T, 0): 20}, {(T, 0): 15}, _never_asked)
    assert [(d.first, d.earliest) for d in found] == [(10, 15)]
    v = found[0].violation()
    assert (v.kind, v.topic, v.partition, v.offset, v.session) == (ViolationKind.DATA_LOSS, T, 0, 10, None)
    assert str(v).startswith(f"INTEGRITY VIOLATION DATA_LOSS topic={T} partition=0 offset=10 session=none ")
    assert v.detail == (f"offsets 10..14 of {T}[0] were never processed and are gone from Kafka "
                        f"(the earliest offset still there is 15)")


def test_a_deleted_topic_whose_sessions_all_ended_or_timed_out_is_no_loss():
    asked = []

    def open_sessions(partitions):
        asked.extend(partitions)
        return {}

    assert _loss({(T, 0): 10, (T, 1): 3, ("other", 0): 5}, {("other", 0): 5}, {("other", 0): 0},
                 open_sessions) == []
    assert asked == [(T, 0), (T, 1)]


def test_a_deleted_topic_with_a_session_still_open_is_a_loss_from_where_the_run_stopped_reading():
    found = find_data_loss({(T, 0): 10, (T, 1): 3}, {}, {},
                           lambda parts: {(T, 1): ["s-b", "s-a", "s-c", "s-d"]})
    assert [(d.topic, d.partition, d.first, d.earliest) for d in found] == [(T, 1, 3, None)]
    assert found[0].detail == (f"{T}[1] was deleted with 4 session(s) not ended (s-a, s-b, s-c and 1 more): "
                               f"offsets from 3 on are gone")


def test_a_partition_deleted_after_the_batch_was_planned_with_nothing_to_read_is_judged_by_its_sessions():
    assert _loss({(T, 0): 10}, {(T, 0): 10}, {(T, 0): None}, lambda parts: {}) == []
    # With records still to read, they are gone.
    assert _loss({(T, 0): 10}, {(T, 0): 12}, {(T, 0): None}) == [(T, 0, 10, None)]


@pytest.mark.parametrize("earliest, lost", [(0, []), (7, [(T, 2, 0, 7)])])
def test_a_new_partition_is_read_from_offset_0_or_lost_up_to_its_earliest(earliest, lost):
    assert _loss({(T, 0): 10}, {(T, 0): 10, (T, 2): 9}, {(T, 0): 0, (T, 2): earliest}) == lost


def test_offsets_are_read_from_the_offset_log_and_the_initial_offsets_file():
    log = 'v1\n{"batchWatermarkMs":0,"conf":{}}\n{"sensor-1":{"0":2,"1":40},"sensor-2":{"0":0}}\n'
    assert offsets_from_log(log) == {("sensor-1", 0): 2, ("sensor-1", 1): 40, ("sensor-2", 0): 0}
    assert offsets_from_log('\x00v1\n{"sensor-1":{"0":0}}') == {("sensor-1", 0): 0}


def test_a_topic_created_again_is_known_by_its_new_topic_id_or_by_its_end_moving_back():
    start = {(T, 0): 10, (T, 1): 0, ("other", 0): 5, ("third", 0): 8}
    end = {(T, 0): 12, (T, 1): 2, ("other", 0): 5, ("third", 0): 3}
    found = recreated_partitions(start, end, {T: "id-1", "other": "id-9"}, {T: "id-2", "other": "id-9"})
    # Partition 1 was read up to offset 0: nothing of the new topic would be skipped there.
    assert found == {(T, 0): f"{T} was deleted and created again (its topic id changed)",
                     ("third", 0): "third[0] ends at offset 3, before offset 8 where the last batch ended: "
                                   "the topic was deleted and created again"}
    # Nothing recorded yet (a first batch, a checkpoint of an earlier release), or the topic gone.
    assert recreated_partitions({(T, 0): 10}, {(T, 0): 12}, {}, {T: "id-2"}) == {}
    assert recreated_partitions({(T, 0): 10}, {}, {T: "id-1"}, {}) == {}
    # The loss check leaves them to ``settle_recreated``.
    assert find_data_loss(start, end, {tp: 0 for tp in end}, _never_asked, found) == []


def test_a_topic_created_again_after_its_sessions_were_done_is_read_again_else_its_old_records_are_lost():
    recreated = {(T, 0): f"{T} was deleted and created again (its topic id changed)", (T, 1): "how"}
    reread, lost = settle_recreated(recreated, {(T, 0): 10, (T, 1): 4}, lambda parts: {(T, 1): ["s-1"]})
    assert reread == [(T, 0)]
    assert [(d.topic, d.partition, d.first, d.earliest) for d in lost] == [(T, 1, 4, None)]
    assert lost[0].detail == "how with 1 session(s) not ended (s-1): the old topic's offsets from 4 on are gone"
    assert settle_recreated({}, {}, _never_asked) == ([], [])


def test_a_partition_left_out_of_the_offset_log_is_new_to_spark():
    log = 'v1\n{"batchWatermarkMs":0,"conf":{"a":"b"}}\n{"sensor-1":{"0":2,"1":40},"sensor-2":{"0":7}}\n'
    kept = offsets_without(log, [("sensor-1", 1), ("sensor-2", 0)])
    assert kept.split("\n")[:2] == log.split("\n")[:2]
    assert offsets_from_log(kept) == {("sensor-1", 0): 2}
