"""64-bit integers stay exact beside nulls, through pyspark's own Arrow-to-pandas conversion.

pyspark's worker turns an int64 Arrow column that holds a null into float64: a ``long`` row
column, or a seq beside a malformed record's null seq, past 2**53 was rounded (or, near 2**63,
failed the cast back).  These tests run a group through pyspark's ``applyInPandasWithState``
serializer and wrapper (``tests.support.worker``), its input shaped as the Spark shell shapes it,
and hold every long of the output, of the state and of the table blob to its exact value.
"""

from __future__ import annotations

import datetime as dt
import json
from itertools import pairwise

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.audit.fold import ChangeFold
from reconstructor.contract.tables import RecordKind
from reconstructor.core.blob import read_table, to_frame
from reconstructor.core.frames import INPUT, VALUE, null_mask, nullable_longs
from reconstructor.core.policy import IntegrityPolicy, OnViolation
from reconstructor.core.step_spec import StepSpec
from reconstructor.spark.stateful import SessionReconstructor, state_from_tuple
from tests.support.model import SCHEMA
from tests.support.worker import VALUE_SCHEMA, call_group, state_tuple

TOPIC, SESSION = "sensor-1", "s1"
TS = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=dt.UTC)
QUARANTINE = IntegrityPolicy(OnViolation.QUARANTINE)
EDGES = (2**63 - 1, -2**63, 2**53 + 1, -(2**53 + 1), 2**63 - 2, 2**53, 0)
LONGS = st.one_of(st.sampled_from(EDGES), st.integers(-2**63, 2**63 - 1))
VALUES = st.one_of(st.none(), LONGS)

_ARROW = pa.schema([("topic", pa.string()), ("group_session", pa.string()), ("partition", pa.int32()),
                    ("offset", pa.int64()), ("kafka_ts", pa.timestamp("us", tz="UTC")), ("key", pa.string()),
                    ("session", pa.string()), ("seq", pa.int64()), ("type", pa.string()),
                    ("event_ts", pa.timestamp("us", tz="UTC")), ("row_pos", pa.int32()), ("row_id", pa.string()),
                    ("op", pa.string()), ("error", pa.string())]
                   + [(f.name, f.type) for f in list(SCHEMA.arrow_schema())[1:]] + [(VALUE, pa.string())])
assert _ARROW.names[2:2 + len(INPUT)] == list(INPUT)


def _records(msgs) -> list[dict]:
    """The JVM's input rows of messages ``(offset, seq, type, rows, error)``: one per message row,
    one with a null row_pos for a rowless message; the raw value on a message's first row."""
    out = []
    for offset, seq, type_, rows, error in msgs:
        base = {"topic": TOPIC, "group_session": SESSION, "partition": 0, "offset": offset,
                "kafka_ts": TS, "key": SESSION, "session": SESSION, "seq": seq, "type": type_,
                "event_ts": TS, "error": error, VALUE: json.dumps({"seq": seq, "type": type_})}
        if not rows:
            out.append({**base, "row_pos": None, "row_id": None, "op": None})
        for pos, (row_id, op, count) in enumerate(rows):
            out.append({**base, "row_pos": pos, "row_id": row_id, "op": op,
                        "reading_count": count, "status": "ok" if op == "upsert" else None,
                        **({VALUE: None} if pos else {})})
    return out


def _batches(records: list[dict], cuts: list[int]) -> list[pa.RecordBatch]:
    """The rows in Arrow batches split at ``cuts``, as the JVM sends a group in chunks, shaped
    as ``stateful.reconstruct_inputs`` shapes them (each nullable long: its value with nulls as
    0, and its null mask, last)."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(records)}), len(records)]
    return [_as_handed_over(pa.RecordBatch.from_pylist(records[a:b], schema=_ARROW))
            for a, b in pairwise(bounds)]


def _as_handed_over(batch: pa.RecordBatch) -> pa.RecordBatch:
    longs = nullable_longs(SCHEMA)
    arrays = [pc.fill_null(c, 0) if n in longs else c for n, c in zip(batch.schema.names, batch.columns)]
    arrays += [pc.is_null(batch.column(n)) for n in longs]
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names + [null_mask(n) for n in longs])


@st.composite
def scenarios(draw):
    """A session's messages: a snapshot, updates (upserts with values or nulls, deletes), then an
    end or a malformed record (a null seq) or neither; seqs and offsets near 2**63 or small."""
    seq = draw(st.sampled_from([0, 2**53 - 1, 2**63 - 40]))
    offset = draw(st.sampled_from([0, 2**53 + 1, 2**63 - 40]))
    table = {f"r{i}": draw(VALUES) for i in range(draw(st.integers(1, 4)))}
    msgs = [(offset, seq, "snapshot", [(rid, "upsert", v) for rid, v in table.items()], None)]
    changes = [(seq, offset, rid, "upsert", v) for rid, v in table.items()]
    for _ in range(draw(st.integers(0, 4))):
        seq, offset = seq + 1, offset + 1
        rows = []
        for _ in range(draw(st.integers(1, 3))):
            if table and draw(st.booleans()) and draw(st.booleans()):
                rid = draw(st.sampled_from(sorted(table)))
                del table[rid]
                rows.append((rid, "delete", None))
            else:
                rid = draw(st.sampled_from([f"r{i}" for i in range(6)]))
                table[rid] = draw(VALUES)
                rows.append((rid, "upsert", table[rid]))
        msgs.append((offset, seq, "update", rows, None))
        changes += [(seq, offset, rid, op, v) for rid, op, v in rows]
    tail = draw(st.sampled_from(["none", "end", "malformed"]))
    if tail == "end":
        seq, offset = seq + 1, offset + 1
        msgs.append((offset, seq, "end", [], None))
    elif tail == "malformed":
        msgs.append((offset + 1, None, "update", [], "seq is missing"))
    records = _records(msgs)
    order = draw(st.permutations(range(len(records))))  # Spark gives no order inside a group
    cuts = draw(st.lists(st.integers(1, max(1, len(records) - 1)), max_size=2))
    return _batches([records[i] for i in order], cuts), changes, table, msgs, tail


def _fn():
    return SessionReconstructor(StepSpec(SCHEMA, session_timeout_ms=60_000, state_retention_ms=7 * 86_400_000,
                                         policy=QUARANTINE))


def _counts(table: pa.Table) -> dict:
    """row id -> reading_count of a session table read back from the state blob, as Arrow holds
    it and as pandas (``state`` prints) does: they must agree."""
    held = dict(zip(table.column(0).to_pylist(), table.column("reading_count").to_pylist()))
    frame = to_frame(table)
    assert {rid: None if pd.isna(v) else int(v) for rid, v in frame["reading_count"].items()} == held
    return held


def _blob_counts(state: tuple) -> dict:
    return _counts(read_table(bytes(state[[f.name for f in VALUE_SCHEMA.fields].index("table")]), SCHEMA))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), VALUES, LONGS)
def test_longs_near_2_63_beside_nulls_stay_exact_through_pyspark_in_output_state_and_blob(case, extra_null,
                                                                                        extra_value):
    batches, changes, table, msgs, tail = case
    rows, pickled = call_group(_fn(), SCHEMA, batches)

    out = [(r["seq"], r["offset"], r["row_id"], r["op"], r["reading_count"])
           for r in rows if r["record"] == RecordKind.CHANGE.value]
    assert out == changes
    last_offset, last_seq = max((m[0], m[1]) for m in msgs if m[1] is not None)
    session = next(r for r in rows if r["record"] == RecordKind.SESSION.value)
    info = json.loads(session["info"])
    if tail == "malformed":
        recorded = [r for r in rows if r["record"] == RecordKind.RECORDED.value]
        assert [(r["seq"], r["offset"]) for r in recorded] == [(None, last_offset + 1)]
        violation = json.loads(recorded[0]["info"])
        assert violation["found_seq"] is None and violation["expected_seq"] == last_seq + 1
        assert info["status"] == "quarantined"
    else:
        assert (session["seq"], session["offset"]) == (last_seq, last_offset)
        assert (info["first_seq"], info["last_seq"], info["snapshot_seq"], info["last_offset"],
                info["snapshot_offset"]) == (msgs[0][1], last_seq, msgs[0][1], last_offset, msgs[0][0])
    state = state_tuple(pickled)
    assert _blob_counts(state) == table
    held = state_from_tuple(state, SCHEMA)
    if tail == "malformed":
        return
    assert (held.first_seq, held.last_seq, held.last_offset) == (msgs[0][1], last_seq, last_offset)
    if tail == "end":
        return

    # The next batch, from the state as the JVM hands it back: an upsert beside a null, the short path.
    nxt = _records([(last_offset + 1, last_seq + 1, "update",
                     [("r0", "upsert", extra_value), ("r9", "upsert", extra_null)], None)])
    rows, pickled = call_group(_fn(), SCHEMA, _batches(nxt, []), pickled)
    assert [(r["seq"], r["offset"], r["row_id"], r["reading_count"]) for r in rows
            if r["record"] == RecordKind.CHANGE.value] == [
        (last_seq + 1, last_offset + 1, "r0", extra_value), (last_seq + 1, last_offset + 1, "r9", extra_null)]
    assert _blob_counts(state_tuple(pickled)) == {**table, "r0": extra_value, "r9": extra_null}


def test_a_recorded_violation_with_a_null_seq_beside_one_past_2_53_keeps_both_exact():
    """Two records set aside in one group: one without a seq, one with seq 2**63 - 2."""
    fn = _fn()
    msgs = [(0, 2**63 - 4, "snapshot", [("a", "upsert", 2**53 + 1)], None),
            (1, None, "update", [], "seq is missing"),
            (2, 2**63 - 2, "update", [("a", "upsert", 1)], None)]
    rows, _ = call_group(fn, SCHEMA, _batches(_records(msgs), []))
    recorded = [(r["offset"], r["seq"]) for r in rows if r["record"] == RecordKind.RECORDED.value]
    assert recorded == [(1, None), (2, 2**63 - 2)]


def test_asof_folds_longs_beside_nulls_exactly():
    fold = ChangeFold(["reading_count"])
    fold.add(pa.table({"topic": ["t"] * 3, "session": ["s"] * 3, "row_id": ["a", "b", "c"],
                       "offset": pa.array([0, 0, 0], pa.int64()), "row_pos": pa.array([0, 1, 2], pa.int32()),
                       "seq": pa.array([2**63 - 1] * 3, pa.int64()), "op": ["upsert"] * 3,
                       "reading_count": pa.array([2**63 - 1, None, 2**53 + 1], pa.int64())}))
    frame = fold.frame("t", "s")
    assert frame["reading_count"].astype(object).where(frame["reading_count"].notna(), None).tolist() == [
        2**63 - 1, None, 2**53 + 1]
    assert json.loads(frame.reset_index().to_json(orient="records"))[2]["reading_count"] == 2**53 + 1

