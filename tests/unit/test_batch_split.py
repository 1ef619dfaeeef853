"""One verdict whatever the micro-batch split: the core checks each session in Kafka offset order.

Spark cuts a partition's records into micro-batches wherever ``maxOffsetsPerTrigger`` or the
trigger falls, and hands a group's rows unordered.  The verdict (the first violation's kind,
record and seqs) and, for a valid stream, the tables must be the same for every cut.
"""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.core import ViolationKind
from reconstructor.core.batch import process_batch
from reconstructor.core.frames import concat_rows
from reconstructor.core.session_status import SessionStatus
from reconstructor.testing.strategies import micro_batches, valid_session
from tests.support.model import SCHEMA, Msg, table_as_dict, to_frame
from tests.unit.test_core_properties import run_core, run_model

PROFILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64_MAX = 2**63 - 1


@st.composite
def perturbed_stream(draw):
    """A session's records in Kafka order: valid, or with one message swapped with its neighbour,
    dropped, repeated, malformed or keyed to another session.  Offsets follow the Kafka order."""
    msgs = draw(valid_session(max_messages=12, restarts=True))
    fault = draw(st.sampled_from(["none", "swap", "drop", "repeat", "malformed", "key"]))
    if len(msgs) > 1 and fault != "none":
        i = draw(st.integers(0, len(msgs) - 2))
        if fault == "swap":
            msgs[i], msgs[i + 1] = msgs[i + 1], msgs[i]
        elif fault == "drop":
            del msgs[i + 1]
        elif fault == "repeat":
            msgs.insert(i + 1, Msg(**{**vars(msgs[i])}))
        elif fault == "malformed":
            msgs[i + 1] = Msg(**{**vars(msgs[i + 1]), "error": "seq must be an integer"})
        else:
            msgs[i + 1] = Msg(**{**vars(msgs[i + 1]), "key": "someone-else"})
    return [Msg(**{**vars(m), "offset": 100 + pos}) for pos, m in enumerate(msgs)]


def verdict(violation):
    if violation is None:
        return None
    return (violation.kind, violation.partition, violation.offset, violation.expected_seq,
            violation.found_seq)


def outcome(batches):
    state, changes, violation = run_core(batches)
    if violation is not None:
        return verdict(violation), None
    log = concat_rows(changes) if changes else pd.DataFrame()
    tables = (table_as_dict(state.table), state.status, state.last_seq, state.last_offset,
              state.snapshot_seq, state.snapshot_offset, state.first_seq)
    return None, (tables, list(zip(log["seq"], log["row_id"], log["op"])) if len(log) else [])


@PROFILE
@given(data=st.data())
def test_the_verdict_and_the_tables_do_not_depend_on_where_micro_batches_end(data):
    msgs = data.draw(perturbed_stream())
    batches = data.draw(micro_batches(msgs))
    whole = outcome([msgs])
    cut = outcome(batches)
    assert cut == whole
    # The reference model walks the records one by one in Kafka order; it agrees on the verdict.
    _, model_violation = run_model([msgs])
    if model_violation is None:
        assert whole[0] is None
    else:
        assert whole[0] is not None
        assert (whole[0][0].value, whole[0][2], whole[0][4]) == (
            model_violation.kind, model_violation.offset, model_violation.seq)


def _swapped():
    snapshot = Msg(150, "snapshot", offset=10, rows=[{"id": "a", "values": {"status": "x"}}])
    return snapshot, Msg(152, "update", offset=11, rows=[{"id": "a", "values": {"status": "z"}}]), \
        Msg(151, "update", offset=12, rows=[{"id": "a", "op": "delete"}])


def test_two_updates_swapped_in_kafka_order_are_a_gap_in_one_batch_as_across_two():
    snapshot, late, early = _swapped()
    for batches in ([[snapshot, late, early]], [[snapshot, late], [early]], [[snapshot], [late, early]]):
        _, _, violation = run_core(batches)
        assert verdict(violation) == (ViolationKind.GAP, 0, 11, 151, 152), batches


def test_a_seq_at_the_largest_long_followed_by_another_message_is_a_duplicate():
    snapshot = Msg(INT64_MAX - 1, "snapshot", offset=1, rows=[{"id": "a", "values": {}}])
    last = Msg(INT64_MAX, "update", offset=2, rows=[{"id": "a", "values": {"status": "x"}}])
    after = Msg(INT64_MAX, "update", offset=3, rows=[{"id": "a", "values": {"status": "y"}}])
    state, _, violation = run_core([[snapshot, last]])
    assert violation is None and state.last_seq == INT64_MAX
    for batches in ([[snapshot, last], [after]], [[snapshot, last, after]]):
        _, _, violation = run_core(batches)
        assert verdict(violation) == (ViolationKind.DUPLICATE, 0, 3, 2**63, INT64_MAX)
        assert "expected_seq=9223372036854775808" in str(violation)
    # An end at the largest seq closes the session; anything after it is AFTER_END.
    end = Msg(INT64_MAX, "end", offset=2)
    state, _, violation = run_core([[snapshot, end]])
    assert violation is None and state.status is SessionStatus.ENDED
    result = process_batch("sensor-1", "s1", [to_frame([after])], state, SCHEMA)
    assert result.violation.kind is ViolationKind.AFTER_END and result.violation.offset == 3


def test_a_violation_prints_on_one_line_with_control_characters_escaped_and_travels_as_a_record():
    from reconstructor.core import ViolationRecord

    v = ViolationRecord(ViolationKind.GAP, "sensor-1", 0, 7, "cab 7\nü\x1b", 3, 5, "missing seq 3..4\r")
    assert str(v) == ("INTEGRITY VIOLATION GAP topic=sensor-1 partition=0 offset=7 session=cab 7\\nü\\x1b "
                      "expected_seq=3 found_seq=5: missing seq 3..4\\r")
    assert ViolationRecord.from_json(v.to_json()) == v
    big = ViolationRecord(ViolationKind.DUPLICATE, "t", 0, 1, "s", 2**63, 2**63 - 1)
    assert ViolationRecord.from_json(big.to_json()).expected_seq == 2**63


def _moved(to_partition: int, from_partition: int):
    """A session on ``from_partition`` (seq 0..2) whose seq 3 and 4 show up on ``to_partition``."""
    home = [Msg(0, "snapshot", partition=from_partition, offset=0, rows=[{"id": "a", "values": {"status": "x"}}])]
    home += [Msg(s, "update", partition=from_partition, offset=s, rows=[{"id": "a", "values": {"status": str(s)}}])
             for s in (1, 2)]
    moved = [Msg(s, "update", partition=to_partition, offset=2 + s, rows=[{"id": "a", "values": {"status": str(s)}}])
             for s in (3, 4)]
    return home, moved


def test_a_session_on_two_partitions_in_one_batch_is_partition_moved_whichever_number_is_lower():
    """The session's partition is the one holding its lowest seq; the first record on the other is
    the verdict, in one batch as across two."""
    for home_partition, other in ((0, 1), (1, 0)):
        home, moved = _moved(other, home_partition)
        expected = (ViolationKind.PARTITION_MOVED, other, 5, 3, 3)
        for batches in ([home + moved], [moved + home], [home, moved]):
            _, _, violation = run_core(batches)
            assert verdict(violation) == expected, (home_partition, batches)
            assert f"was on sensor-1[{home_partition}] and shows up on sensor-1[{other}]" in violation.detail
        # The moved records alone, in a batch before any of the session's own: no snapshot yet.
        _, _, violation = run_core([moved, home])
        assert verdict(violation) == (ViolationKind.NO_SNAPSHOT, other, 5, None, 3)


@st.composite
def crossing_stream(draw):
    """A session's records on two partitions (a moved tail, a moved stretch that comes back, or
    one moved record; the lower number either side), valid or perturbed, offsets consecutive on
    each partition; in the order one micro-batch walks them: the partition holding the lowest seq
    first, by offset, then the other."""
    msgs = draw(perturbed_stream())
    if len(msgs) > 1:
        start = draw(st.integers(1, len(msgs) - 1))
        end = draw(st.integers(start + 1, len(msgs)))
        home, other = draw(st.sampled_from([(0, 1), (1, 0)]))
        msgs = [Msg(**{**vars(m), "partition": other if start <= i < end else home}) for i, m in enumerate(msgs)]
    offsets: dict[int, int] = {}
    for m in msgs:
        m.offset = offsets.get(m.partition, 0)
        offsets[m.partition] = m.offset + 1
    first = min((m.seq, m.partition) for m in msgs)[1]
    return sorted(msgs, key=lambda m: (m.partition != first, m.partition, m.offset))


@settings(PROFILE, max_examples=40)
@given(data=st.data())
def test_a_session_on_two_partitions_gets_one_batchs_verdict_from_batches_that_bring_its_own_partition_first(data):
    """Records of a session on two partitions have no order between them; the rule gives them
    one (its partition, then the other).  Micro-batches that bring them in that order, cut
    anywhere (a live run's, whose batches follow the producer), give one batch's verdict and
    tables, as the reference model walks them."""
    msgs = data.draw(crossing_stream())
    whole = outcome([msgs])
    assert outcome(data.draw(micro_batches(msgs))) == whole
    _, model_violation = run_model([msgs])
    assert (None if whole[0] is None else (whole[0][0].value, whole[0][2], whole[0][4])) == (
        None if model_violation is None else (model_violation.kind, model_violation.offset, model_violation.seq))


def test_a_run_that_reads_the_other_partition_first_judges_what_it_read_first():
    """The contract's rule where cuts matter: a session that went to partition 1 for seq 2 and came
    back.  One batch walks its own partition first (seq 3 is a GAP); a run whose earlier batch
    brought seq 2 judges it first (PARTITION_MOVED): it cannot know of records it has not read."""
    own = [Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {}}]), Msg(1, "update", offset=1)]
    away, back = Msg(2, "update", partition=1, offset=0), Msg(3, "update", offset=2)
    assert verdict(run_core([[*own, away, back]])[2]) == (ViolationKind.GAP, 0, 2, 2, 3)
    assert verdict(run_core([[*own, back], [away]])[2]) == (ViolationKind.GAP, 0, 2, 2, 3)
    assert verdict(run_core([[*own, away], [back]])[2]) == (ViolationKind.PARTITION_MOVED, 1, 0, 2, 2)
