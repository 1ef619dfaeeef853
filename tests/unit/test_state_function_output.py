"""The state function's output frames, called the way pyspark's worker calls it (no JVM).

pyspark concatenates every group's output frames before converting them to Arrow, so their shape
is part of the contract with the sinks: one frame per group, its change rows then its session row,
and each column in the change rows' dtype (a differently typed row turns that column to objects
for the whole batch).
"""

from __future__ import annotations

import json

import pandas as pd

from reconstructor.core.session import process_batch
from reconstructor.spark.stateful import (CHANGE_RECORD, SESSION_RECORD, VIOLATION_RECORD,
                                          SessionReconstructor, state_to_tuple)
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
    fn = SessionReconstructor(SCHEMA, session_timeout_ms=60_000)
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}},
                                                   {"id": "b", "values": {"reading_count": 7}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state
    updates = [Msg(1, "update", offset=1, rows=[{"id": "a", "values": {"temperature": 2.5}}]),
               Msg(2, "update", offset=2, rows=[{"id": "b", "op": "delete"}])]

    frames = call(fn, [typed(to_frame(updates))], group_state(state))

    assert len(frames) == 1
    out = frames[0]
    assert list(out.columns) == fn.columns
    assert list(out["record"]) == [CHANGE_RECORD, CHANGE_RECORD, SESSION_RECORD]
    assert list(out["row_id"][:2]) == ["a", "b"] and list(out["op"][:2]) == ["upsert", "delete"]
    assert list(out["is_latest"][:2]) == [True, True]
    session = out.iloc[-1]
    assert (session["partition"], session["offset"], session["seq"]) == (0, 2, 2)
    assert json.loads(session["info"]) == {
        "status": "open", "first_seq": 0, "last_seq": 2, "last_offset": 2, "snapshot_seq": 0,
        "snapshot_offset": 0, "row_count": 1, "started_us": 1795255200000000,
        "last_event_us": 1795255202000000}
    # Typed like the change rows, so pyspark's concatenation of all groups keeps them typed.
    dtypes = out.dtypes.astype(str).to_dict()
    assert {c: dtypes[c] for c in ("partition", "offset", "seq", "temperature", "reading_count",
                                   "event_ts", "kafka_ts")} == {
        "partition": "int64", "offset": "int64", "seq": "int64", "temperature": "float64",
        "reading_count": "Int64", "event_ts": "datetime64[ns]", "kafka_ts": "datetime64[ns]"}
    assert pd.isna(session["row_id"]) and pd.isna(session["temperature"]) and pd.isna(session["event_ts"])


def test_a_timed_out_session_is_one_session_row_and_a_violation_one_violation_row():
    fn = SessionReconstructor(SCHEMA, session_timeout_ms=60_000)
    snapshot = Msg(0, "snapshot", offset=0, rows=[{"id": "a", "values": {"temperature": 1.0}}])
    state = process_batch("sensor-1", "s1", [to_frame([snapshot])], None, SCHEMA).state

    (timed_out,) = call(fn, [], group_state(state, timed_out=True))
    assert list(timed_out["record"]) == [SESSION_RECORD]
    assert json.loads(timed_out["info"].iloc[0])["status"] == "timed_out"

    gap = [Msg(5, "update", offset=5, rows=[{"id": "a", "values": {}}])]
    (violation,) = call(fn, [typed(to_frame(gap))], group_state(state))
    assert list(violation["record"]) == [VIOLATION_RECORD]
    assert violation["info"].iloc[0].startswith("INTEGRITY VIOLATION GAP")
