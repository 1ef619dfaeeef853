"""The state function's output frames, called the way pyspark's worker calls it (no JVM).

pyspark concatenates every group's output frames before converting them to Arrow, so their shape
is part of the contract with the sinks: one frame per group, its change rows then its session row,
and each column in the change rows' dtype (a differently typed row turns that column to objects
for the whole batch).
"""

from __future__ import annotations

import json

import pandas as pd

from reconstructor.contract.tables import RecordKind
from reconstructor.core import ViolationKind, ViolationRecord
from reconstructor.core.batch import process_batch
from reconstructor.core.policy import IntegrityPolicy, OnViolation
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.step_spec import StepSpec, StepStart
from reconstructor.spark.stateful import SessionReconstructor, state_from_tuple, state_to_tuple
from tests.support.groupstate import group_state as _group_state
from tests.support.model import SCHEMA, Msg, to_frame


def group_state(state=None, timed_out=False):
    return _group_state(None if state is None else state_to_tuple(state, SCHEMA), timed_out)


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The input as Spark hands it over: typed columns."""
    return frame.astype({"temperature": "float64", "pressure": "float64", "humidity": "float64",
                         "reading_count": "Int64", "calibrated_at": "datetime64[ns]"})


def call(fn, frames, gs) -> list[pd.DataFrame]:
    return list(fn(("sensor-1", "s1"), iter(frames), gs))


def test_one_frame_per_group_change_rows_then_the_session_row_in_the_change_rows_dtypes():
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=7 * 86_400_000))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}},
                                                   {"id": "b", "values": {"reading_count": 7}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state
    updates = [Msg(1, "update", offset=1, rows=[{"id": "a", "values": {"temperature": 2.5}}]),
               Msg(2, "update", offset=2, rows=[{"id": "b", "op": "delete"}])]

    gs = group_state(state)
    frames = call(fn, [typed(to_frame(updates))], gs)

    assert len(frames) == 1
    out = frames[0]
    assert list(out.columns) == fn.columns
    assert list(out["record"]) == [RecordKind.CHANGE, RecordKind.CHANGE, RecordKind.SESSION]
    assert list(out["row_id"][:2]) == ["a", "b"] and list(out["op"][:2]) == ["upsert", "delete"]
    assert list(out["is_latest"][:2]) == [True, True]
    session = out.iloc[-1]
    assert (session["partition"], session["offset"], session["seq"]) == (0, 2, 2)
    # A state with no chain head (as one written before the chain) starts a chain at its next message.
    assert out["chain_prev"][0] == "" and out["chain_prev"][1] == out["chain_digest"][0] != out["chain_digest"][1]
    assert json.loads(session["info"]) == {
        "status": "open", "first_seq": 0, "last_seq": 2, "last_offset": 2, "snapshot_seq": 0,
        "snapshot_offset": 0, "row_count": 1, "started_us": 1795255200000000,
        "last_event_us": 1795255202000000, "chain_head": out["chain_digest"][1], "chain_seal": None}
    # The head is kept with the state, and the next batch continues from it.
    more = call(fn, [typed(to_frame([Msg(3, "update", offset=3, rows=[{"id": "a", "values": {"temperature": 3.0}}])]))],
                _group_state(tuple(gs.get)))
    assert more[0]["chain_prev"][0] == out["chain_digest"][1]
    # Typed like the change rows, so pyspark's concatenation of all groups keeps them typed.
    dtypes = out.dtypes.astype(str).to_dict()
    assert {c: dtypes[c] for c in ("partition", "offset", "seq", "temperature", "reading_count",
                                   "event_ts", "kafka_ts")} == {
        "partition": "int64", "offset": "int64", "seq": "int64", "temperature": "float64",
        "reading_count": "Int64", "event_ts": "datetime64[ns]", "kafka_ts": "datetime64[ns]"}
    assert pd.isna(session["row_id"]) and pd.isna(session["temperature"]) and pd.isna(session["event_ts"])


def test_a_timed_out_session_is_one_session_row_and_a_violation_one_violation_row():
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=7 * 86_400_000))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state

    (timed_out,) = call(fn, [], group_state(state, timed_out=True))
    assert list(timed_out["record"]) == [RecordKind.SESSION]
    assert json.loads(timed_out["info"].iloc[0])["status"] == "timed_out"

    gap = [Msg(5, "update", offset=5, rows=[{"id": "a", "values": {}}])]
    (violation,) = call(fn, [typed(to_frame(gap))], group_state(state))
    assert list(violation["record"]) == [RecordKind.VIOLATION]
    carried = ViolationRecord.from_json(violation["info"].iloc[0])  # a record, not text to parse
    assert (carried.kind, carried.offset, carried.expected_seq, carried.found_seq) == (ViolationKind.GAP, 5, 1, 5)
    assert (violation["partition"].iloc[0], violation["offset"].iloc[0]) == (0, 5)
    assert str(carried).startswith("INTEGRITY VIOLATION GAP topic=sensor-1 partition=0 offset=5 session=s1")


RETENTION_MS = 3_600_000


def test_a_timed_out_session_keeps_its_table_and_resumes_exactly_with_the_next_seq():
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=RETENTION_MS))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}},
                                                   {"id": "b", "values": {"status": "kept"}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state

    silent = group_state(state, timed_out=True)
    (out,) = call(fn, [], silent)
    assert list(out["record"]) == [RecordKind.SESSION]
    assert json.loads(out["info"].iloc[0])["status"] == "timed_out"
    # The state stays, with its table, until the retention has passed too.
    assert silent.exists and silent._timeout_timestamp == RETENTION_MS - 60_000
    assert type(silent.get[1]) is str and silent.get[1] == "timed_out"  # Spark's state: the plain value
    kept = state_from_tuple(silent.get, SCHEMA)
    assert kept.status is SessionStatus.TIMED_OUT and kept.last_seq == 0 and sorted(kept.table.index) == ["a", "b"]

    # It resumes with the next seq: no violation, open again, and every row back in current_rows
    # (the changed one as a change, the others as rows for current_rows only).
    resumed = _group_state(silent.get)
    update = Msg(1, "update", offset=1, rows=[{"id": "a", "values": {"temperature": 2.0}}])
    (out,) = call(fn, [typed(to_frame([update]))], resumed)
    assert list(out["record"]) == [RecordKind.CHANGE, RecordKind.CURRENT, RecordKind.SESSION]
    assert list(out["row_id"][:2]) == ["a", "b"] and out["status"][1] == "kept"
    assert list(out["is_latest"][:2]) == [True, True]
    assert (out["seq"][1], out["offset"][1]) == (0, 0)  # the session's last record before its timeout
    info = json.loads(out["info"].iloc[-1])
    assert (info["status"], info["last_seq"], info["row_count"]) == ("open", 1, 2)
    assert state_from_tuple(resumed.get, SCHEMA).status is SessionStatus.OPEN

    # Silent past its retention as well: forgotten, with nothing written.
    forgotten = _group_state(silent.get, timed_out=True)
    assert call(fn, [], forgotten) == [] and forgotten._removed


def test_a_timed_out_session_resumed_by_an_update_of_no_rows_gets_its_rows_back_without_a_pandas_warning():
    """An update that changes no row gives the batch no change rows: the rows brought back are the
    whole output (pandas warns, an error under the tests' settings, on a concatenation with an
    empty frame)."""
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=RETENTION_MS))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state
    silent = group_state(state, timed_out=True)
    call(fn, [], silent)
    resumed = _group_state(silent.get)
    (out,) = call(fn, [typed(to_frame([Msg(1, "update", offset=1, rows=[])]))], resumed)
    assert list(out["record"]) == [RecordKind.CURRENT, RecordKind.SESSION]
    assert out["row_id"][0] == "a" and out["temperature"][0] == 1.0 and (out["seq"][0], out["offset"][0]) == (0, 0)
    assert json.loads(out["info"].iloc[-1])["last_seq"] == 1


def test_an_ended_session_keeps_its_scalars_after_its_timeout_so_a_resent_session_is_after_end():
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=RETENTION_MS))
    msgs = [Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {}}]), Msg(1, "end", offset=1)]
    ended = process_batch("sensor-1", "s1", [to_frame(msgs)], None, SCHEMA).state
    assert ended.status is SessionStatus.ENDED

    silent = group_state(ended, timed_out=True)
    assert call(fn, [], silent) == []
    assert silent.exists and silent.get[-1] is None  # the table is dropped, the scalars stay
    assert silent._timeout_timestamp == RETENTION_MS - 60_000

    resent = _group_state(silent.get)
    (out,) = call(fn, [typed(to_frame([Msg(0, "snapshot", offset=2, rows=[{"id": "a", "values": {}}])]))], resent)
    carried = ViolationRecord.from_json(out["info"].iloc[0])
    assert (carried.kind, carried.offset) == (ViolationKind.AFTER_END, 2)

    forgotten = _group_state(silent.get, timed_out=True)
    assert call(fn, [], forgotten) == [] and forgotten._removed


def test_in_quarantine_mode_a_violation_is_recorded_rows_and_the_session_waits_for_its_resync():
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=RETENTION_MS,
                                       policy=IntegrityPolicy(OnViolation.QUARANTINE)))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state
    gap = typed(to_frame([Msg(1, "update", offset=1, rows=[{"id": "a", "values": {}}]),
                          Msg(3, "update", offset=2, rows=[{"id": "a", "values": {}}])]))
    gs = group_state(state)
    recorded, out = call(fn, [gap.assign(value=["v1", "v2"])], gs)

    assert list(recorded["record"]) == [RecordKind.RECORDED]
    v = ViolationRecord.from_json(recorded["info"].iloc[0])
    assert (v.kind, v.offset, v.expected_seq, v.found_seq, v.value) == (ViolationKind.GAP, 2, 2, 3, "v2")
    assert list(out["record"]) == [RecordKind.CHANGE, RecordKind.SESSION]  # seq 1 applied before the gap
    assert json.loads(out["info"].iloc[-1])["status"] == "quarantined"
    assert gs._timeout_timestamp == RETENTION_MS  # set aside for the retention, not the timeout

    # Records before its next snapshot: recorded as skipped, the state unchanged.
    waiting = _group_state(gs.get)
    (skipped,) = call(fn, [typed(to_frame([Msg(4, "update", offset=3, rows=[{"id": "a", "values": {}}])]))],
                      waiting)
    assert [ViolationRecord.from_json(i).kind for i in skipped["info"]] == [ViolationKind.SKIPPED]
    assert not waiting._updated and waiting._timeout_timestamp == RETENTION_MS

    # The next snapshot resyncs it: open, its table the snapshot's.
    resync = Msg(5, "snapshot", offset=4, rows=[{"id": "b", "values": {}}])
    drift, out = call(fn, [typed(to_frame([resync]))], _group_state(gs.get))
    assert ViolationRecord.from_json(drift["info"].iloc[0]).kind == ViolationKind.SNAPSHOT_DRIFT
    assert list(zip(out["row_id"][:2], out["op"][:2])) == [("a", "delete"), ("b", "upsert")]
    assert json.loads(out["info"].iloc[-1])["status"] == "open"

    # Quarantined and silent for the retention: forgotten, with nothing written.
    forgotten = _group_state(gs.get, timed_out=True)
    assert call(fn, [], forgotten) == [] and forgotten._removed


def test_in_quarantine_mode_a_data_loss_on_its_partition_sets_a_session_aside_when_it_next_runs():
    from reconstructor.core.data_loss import DataLoss

    loss = DataLoss("sensor-1", 0, 5, 8, "offsets 5..7 of sensor-1[0] were never processed and are gone")
    fn = SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=RETENTION_MS,
                                       policy=IntegrityPolicy(OnViolation.QUARANTINE)),
                              StepStart(losses={("sensor-1", 0): [loss]}))
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state

    # Its next record, past the loss: its own DATA_LOSS row, the record set aside, quarantined.
    gs = group_state(state)
    recorded, out = call(fn, [typed(to_frame([Msg(1, "update", offset=9, rows=[{"id": "a", "values": {}}])]))
                              .assign(value=["v9"])], gs)
    kinds = [ViolationRecord.from_json(i) for i in recorded["info"]]
    assert [(v.kind, v.session, v.offset, v.expected_seq, v.found_seq) for v in kinds] == [
        (ViolationKind.DATA_LOSS, "s1", 5, 1, None), (ViolationKind.SKIPPED, "s1", 9, None, 1)]
    assert list(out["record"]) == [RecordKind.SESSION]
    assert json.loads(out["info"].iloc[-1])["status"] == "quarantined"
    assert state_from_tuple(gs.get, SCHEMA).status == SessionStatus.QUARANTINED
    # Told again later (the loss stays known), a quarantined session is not set aside twice.
    (skipped,) = call(fn, [typed(to_frame([Msg(2, "update", offset=10, rows=[{"id": "a", "values": {}}])]))],
                      _group_state(gs.get))
    assert [ViolationRecord.from_json(i).kind for i in skipped["info"]] == [ViolationKind.SKIPPED]

    # Silent since the loss: its timeout sets it aside instead of timing it out.
    silent = _group_state(state_to_tuple(state, SCHEMA), timed_out=True)
    recorded, out = call(fn, [], silent)
    assert [ViolationRecord.from_json(i).kind for i in recorded["info"]] == [ViolationKind.DATA_LOSS]
    assert json.loads(out["info"].iloc[-1])["status"] == "quarantined"
    assert state_from_tuple(silent.get, SCHEMA).status == SessionStatus.QUARANTINED
    assert state_from_tuple(silent.get, SCHEMA).row_count == 1  # its table kept for the resync

    # A session seen past the loss (started after it) is not reached.
    later = process_batch("sensor-1", "s2", [to_frame([Msg(0, "snapshot", offset=11, session="s2",
                                                           rows=[{"id": "a", "values": {}}])])], None, SCHEMA).state
    (out,) = call(fn, [typed(to_frame([Msg(1, "update", offset=12, session="s2", rows=[{"id": "a", "values": {}}])]))
                       .assign(value=["v12"])], group_state(later))
    assert json.loads(out["info"].iloc[-1])["status"] == "open"
