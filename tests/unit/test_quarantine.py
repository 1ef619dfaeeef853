"""Quarantine mode and the snapshot audit in the pure core, against the reference model (no Spark).

In quarantine mode a violating session is set aside until its next snapshot resyncs it; every
record it refused is recorded.  What is applied, recorded and kept must not depend on where
micro-batches end, and a resync must leave the session exactly as a clean run from that snapshot.
"""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reconstructor.core import ViolationKind
from reconstructor.core.batch import process_batch
from reconstructor.core.blob import dump_table, read_table
from reconstructor.core.policy import IntegrityPolicy, OnDrift, OnViolation
from reconstructor.core.session_status import SessionStatus
from reconstructor.testing.strategies import micro_batches, valid_session
from tests.support.model import SCHEMA, Msg, QuarantineModel, normalise_values, split_rows, table_as_dict, to_frame

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=[Phase.explicit, Phase.reuse, Phase.generate])
QUARANTINE = IntegrityPolicy(OnViolation.QUARANTINE)


def run(batches, policy=QUARANTINE, session="s1", state=None):
    """The core over ``batches`` (each shuffled into two frames, the state through its blob between
    batches, as the Spark shell does): (state, change log, recorded, stopping violation)."""
    log, recorded = [], []
    for i, batch in enumerate(batches):
        frame = to_frame(batch).sample(frac=1, random_state=i)
        frames = [f for f in split_rows(frame, 2) if len(f)]
        result = process_batch("sensor-1", session, frames, state, SCHEMA, policy=policy)
        if result.violation is not None:
            return state, log, recorded, result.violation
        log += list(zip(result.changes["seq"], result.changes["row_id"], result.changes["op"]))
        recorded += result.recorded
        state = result.state
        if state is not None:
            state.stored = read_table(dump_table(state.stored, SCHEMA), SCHEMA)
    return state, log, recorded, None


def fold(changes: pd.DataFrame | list) -> set:
    """The row ids a change log leaves, folded in order."""
    rows: set = set()
    for _, rid, op in changes:
        (rows.discard if op == "delete" else rows.add)(rid)
    return rows


@st.composite
def faulty_stream(draw):
    """A session's records in Kafka order with one to three faults (a record dropped, repeated,
    swapped with its neighbour, malformed, keyed to another session, a delete of an unknown row,
    the first snapshot lost), and snapshots that can resync it.  Offsets follow the Kafka order."""
    msgs = draw(valid_session(max_messages=14, restarts=True))
    for _ in range(draw(st.integers(1, 3))):
        if len(msgs) < 2:
            break
        i = draw(st.integers(0, len(msgs) - 2))
        fault = draw(st.sampled_from(["drop", "repeat", "swap", "malformed", "key", "unknown_row", "lose_first",
                                      "stale_snapshot"]))
        if fault == "drop":
            del msgs[i + 1]
        elif fault == "repeat":
            msgs.insert(i + 1, Msg(**vars(msgs[i])))
        elif fault == "swap":
            msgs[i], msgs[i + 1] = msgs[i + 1], msgs[i]
        elif fault == "malformed":
            msgs[i + 1] = Msg(**{**vars(msgs[i + 1]), "error": "seq must be an integer"})
        elif fault == "key":
            msgs[i + 1] = Msg(**{**vars(msgs[i + 1]), "key": "someone-else"})
        elif fault == "stale_snapshot":  # an old snapshot delivered again, later
            msgs.insert(i + 1, Msg(**vars(msgs[0])))
        elif fault == "unknown_row":
            msgs[i + 1] = Msg(**{**vars(msgs[i + 1]), "type": "update", "rows": [{"id": "nope", "op": "delete"}]})
        else:
            del msgs[0]
    return [Msg(**{**vars(m), "offset": 100 + pos}) for pos, m in enumerate(msgs)]


def outcome(batches):
    state, log, recorded, violation = run(batches)
    assert violation is None, "quarantine mode never stops on a violation"
    table = table_as_dict(state.table) if state is not None else None
    status = state.status.value if state is not None else None
    return table, status, log, [(r.kind.value, r.offset) for r in recorded]


@PROFILE
@given(data=st.data())
def test_quarantine_agrees_with_the_model_whatever_the_micro_batch_split(data):
    msgs = data.draw(faulty_stream())
    whole = outcome([msgs])
    assert outcome(data.draw(micro_batches(msgs))) == whole

    model = QuarantineModel()
    model.apply_batch(msgs)
    table, status, log, recorded = whole
    assert recorded == model.recorded
    assert status == model.status
    if model.strict.table is not None:
        assert table == {rid: normalise_values(v) for rid, v in model.strict.table.items()}
        assert log == [(s, r, o) for s, r, o, _ in model.strict.changes]
        # row_changes folded in order give the session's table, through quarantines and resyncs.
        assert fold(log) == set(table)


@PROFILE
@given(data=st.data())
def test_a_resync_leaves_the_session_as_a_clean_run_from_the_resync_snapshot(data):
    """Quarantine, then the next snapshot: the same table, seqs and later changes as a strict run
    that starts at that snapshot."""
    msgs = data.draw(valid_session(max_messages=14, restarts=True))
    snapshots = [i for i, m in enumerate(msgs) if m.type == "snapshot" and i > 0]
    if not snapshots:
        msgs.insert(len(msgs) - (msgs[-1].type == "end"), Msg(0, "snapshot", rows=[{"id": "r1", "values": {}}]))
        msgs = [Msg(**{**vars(m), "seq": msgs[0].seq + k}) for k, m in enumerate(msgs)]
        snapshots = [i for i, m in enumerate(msgs) if m.type == "snapshot" and i > 0]
    resync = data.draw(st.sampled_from(snapshots))
    fault = data.draw(st.integers(1, resync))  # a record lost somewhere before the resync snapshot
    faulty = msgs[:fault] + msgs[fault + 1:] if fault < resync else msgs[:fault - 1] + msgs[fault:]
    faulty = [Msg(**{**vars(m), "offset": 100 + k}) for k, m in enumerate(faulty)]
    clean = [Msg(**{**vars(m), "offset": 100 + k}) for k, m in enumerate(msgs)][resync:]
    state, log, _recorded, _ = run(data.draw(micro_batches(faulty)))
    ref, ref_log, _, violation = run([clean], policy=IntegrityPolicy())
    assert violation is None
    assert state.status == ref.status
    assert table_as_dict(state.table) == table_as_dict(ref.table)
    assert (state.last_seq, state.snapshot_seq) == (ref.last_seq, ref.snapshot_seq)
    # After the resync snapshot's own deletes, the changes are the clean run's.
    assert log[-len(ref_log):] == ref_log or not ref_log
    assert fold(log) == set(state.table.index)


def gap_then_resync():
    a, b = {"temperature": 1.0}, {"temperature": 2.0}
    return [Msg(0, "snapshot", [{"id": "a", "values": a}, {"id": "b", "values": a}], offset=0),
            Msg(1, "update", [{"id": "a", "values": b}], offset=1),
            Msg(3, "update", [{"id": "b", "values": b}], offset=2),  # seq 2 is lost
            Msg(4, "update", [{"id": "b", "op": "delete"}], offset=3),
            Msg(5, "snapshot", [{"id": "a", "values": b}, {"id": "c", "values": a}], offset=4),
            Msg(6, "update", [{"id": "c", "values": b}], offset=5)]


def test_a_gap_quarantines_the_session_its_records_are_set_aside_and_the_next_snapshot_resyncs_it():
    msgs = gap_then_resync()
    state, log, recorded, _ = run([msgs[:3]])
    assert state.status == SessionStatus.QUARANTINED
    assert (state.last_seq, state.last_offset) == (1, 1)  # the last applied message
    assert [(r.kind, r.offset, r.expected_seq, r.found_seq) for r in recorded] == [
        (ViolationKind.GAP, 2, 2, 3)]

    state, log, recorded, _ = run([msgs[3:]], state=state)
    assert state.status == SessionStatus.OPEN and state.last_seq == 6 and state.snapshot_seq == 5
    assert [(r.kind, r.offset) for r in recorded] == [(ViolationKind.SKIPPED, 3), (ViolationKind.SNAPSHOT_DRIFT, 4)]
    assert "quarantined" in recorded[0].detail
    # The resync snapshot drops b (a delete, so the change log still folds to the table).
    assert log == [(5, "b", "delete"), (5, "a", "upsert"), (5, "c", "upsert"), (6, "c", "upsert")]
    assert "1 missing ('b')" in recorded[1].detail and "1 extra ('c')" in recorded[1].detail


def test_an_old_snapshot_delivered_again_never_resyncs_a_quarantined_session_to_its_older_seq():
    a, b = {"temperature": 1.0}, {"temperature": 2.0}
    msgs = gap_then_resync()[:3] + [
        Msg(0, "snapshot", [{"id": "a", "values": a}, {"id": "b", "values": a}], offset=3),  # seq 0 again
        Msg(1, "snapshot", [{"id": "a", "values": a}], offset=4),  # the last applied seq: old data too
        Msg(4, "update", [{"id": "a", "values": a}], offset=5),
        Msg(5, "snapshot", [{"id": "a", "values": b}], offset=6)]
    for batches in ([msgs], [msgs[:4], msgs[4:]]):
        state, _log, recorded, _ = run(batches)
        assert [(r.kind, r.offset) for r in recorded] == [
            (ViolationKind.GAP, 2), (ViolationKind.SKIPPED, 3), (ViolationKind.SKIPPED, 4),
            (ViolationKind.SKIPPED, 5), (ViolationKind.SNAPSHOT_DRIFT, 6)]
        assert state.status == SessionStatus.OPEN and (state.last_seq, state.snapshot_seq) == (5, 5)
        assert table_as_dict(state.table) == {"a": normalise_values(b)}


def test_fail_mode_stops_on_the_same_stream_and_records_nothing():
    _state, log, recorded, violation = run([gap_then_resync()], policy=IntegrityPolicy())
    assert violation.kind == ViolationKind.GAP and violation.offset == 2
    assert recorded == [] and log == []


def test_a_session_quarantined_before_anything_applied_waits_for_its_first_snapshot():
    msgs = [Msg(3, "update", [{"id": "a", "values": {}}], offset=0),
            Msg(4, "update", [{"id": "a", "values": {}}], offset=1),
            Msg(5, "snapshot", [{"id": "a", "values": {"status": "ok"}}], offset=2)]
    state, log, recorded, _ = run([msgs[:2]])
    assert state.status == SessionStatus.QUARANTINED and state.last_seq is None and state.first_seq is None
    assert [(r.kind, r.offset) for r in recorded] == [(ViolationKind.NO_SNAPSHOT, 0), (ViolationKind.SKIPPED, 1)]
    state, log, recorded, _ = run([msgs[2:]], state=state)
    assert state.status == SessionStatus.OPEN and (state.first_seq, state.last_seq) == (5, 5)
    assert recorded == [] and log == [(5, "a", "upsert")]  # no audit: no table was known


def test_an_ended_session_stays_ended_and_every_later_record_is_after_end():
    msgs = [Msg(0, "snapshot", [{"id": "a", "values": {}}], offset=0), Msg(1, "end", offset=1),
            Msg(0, "snapshot", [{"id": "a", "values": {}}], offset=2), Msg(1, "update", offset=3, error="bad")]
    state, _log, recorded, _ = run([msgs])
    assert state.status == SessionStatus.ENDED and state.last_seq == 1
    assert [(r.kind, r.offset) for r in recorded] == [(ViolationKind.AFTER_END, 2), (ViolationKind.AFTER_END, 3)]


def test_records_that_name_no_session_are_malformed_with_a_null_session_and_keep_no_state():
    msgs = [Msg(0, "update", offset=7, session=None, key=None, error="value is not valid JSON"),
            Msg(0, "update", offset=9, session=None, key=None, error="value is not valid JSON")]
    frame = to_frame(msgs).assign(key=None, session=None, seq=None)
    result = process_batch("sensor-1", None, [frame], None, SCHEMA, policy=QUARANTINE)
    assert result.violation is None and result.state is None
    assert [(r.kind, r.offset, r.session, r.detail) for r in result.recorded] == [
        (ViolationKind.MALFORMED, 7, None, "value is not valid JSON"),
        (ViolationKind.MALFORMED, 9, None, "value is not valid JSON")]


def test_a_recorded_record_carries_its_raw_value_where_the_stream_has_one():
    msgs = gap_then_resync()[:4]
    frame = to_frame(msgs)
    frame["value"] = [f"raw-{o}" if p in (0,) or pd.isna(p) else None
                      for o, p in zip(frame["offset"], frame["row_pos"])]
    result = process_batch("sensor-1", "s1", [frame], None, SCHEMA, policy=QUARANTINE)
    assert [(r.kind, r.value) for r in result.recorded] == [
        (ViolationKind.GAP, "raw-2"), (ViolationKind.SKIPPED, "raw-3")]


def test_a_dropped_update_before_a_periodic_snapshot_is_recorded_as_drift_with_the_row_id():
    """Every seq arrived, but an update lost a row on its way: only the audit can see it."""
    msgs = [Msg(0, "snapshot", [{"id": "a", "values": {"status": "ok"}}, {"id": "b", "values": {}}], offset=0),
            Msg(1, "update", [], offset=1),  # upstream, this update changed row b; its row was lost
            Msg(2, "snapshot", [{"id": "a", "values": {"status": "ok"}},
                                {"id": "b", "values": {"status": "warn"}}], offset=2)]
    state, _log, recorded, violation = run([msgs], policy=IntegrityPolicy())  # the default: record
    assert violation is None and state.status == SessionStatus.OPEN
    assert [(r.kind, r.offset, r.found_seq) for r in recorded] == [(ViolationKind.SNAPSHOT_DRIFT, 2, 2)]
    assert recorded[0].detail == ("snapshot differs from the table rebuilt from the updates: "
                                  "0 missing, 0 extra, 1 changed ('b')")
    assert table_as_dict(state.table)["b"]["status"] == "warn"  # the snapshot applies

    _, _, recorded, violation = run([msgs], policy=IntegrityPolicy(on_drift=OnDrift.FAIL))
    assert violation.kind == ViolationKind.SNAPSHOT_DRIFT and violation.offset == 2 and recorded == []
    _, _, recorded, violation = run([msgs], policy=IntegrityPolicy(on_drift=OnDrift.IGNORE))
    assert violation is None and recorded == []
    # A drift stops the query in quarantine mode too: it does not quarantine the session.
    _, _, _, violation = run([msgs], policy=IntegrityPolicy(OnViolation.QUARANTINE, OnDrift.FAIL))
    assert violation.kind == ViolationKind.SNAPSHOT_DRIFT


def test_a_periodic_snapshot_equal_to_the_rebuilt_table_records_nothing():
    msgs = [Msg(0, "snapshot", [{"id": "a", "values": {"temperature": 0.1}}], offset=0),
            Msg(1, "update", [{"id": "b", "values": {"reading_count": 3}}], offset=1),
            Msg(2, "snapshot", [{"id": "b", "values": {"reading_count": 3}},
                                {"id": "a", "values": {"temperature": 0.1}}], offset=2)]
    for batches in ([msgs], [[m] for m in msgs]):
        _, _, recorded, violation = run(batches, policy=IntegrityPolicy())
        assert violation is None and recorded == []
