"""Property tests of the pure core against the dict-replay reference model (no Spark)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconstructor.core import ViolationKind
from reconstructor.core.batch import apply_in_kafka_order, apply_update_run, process_batch
from reconstructor.core.blob import dump_table, load_table, read_table
from reconstructor.core.frames import concat_rows
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.table import last_change_per_row
from reconstructor.testing.strategies import batches_of, valid_session
from tests.support.model import (
    SCHEMA,
    Model,
    ModelViolation,
    Msg,
    normalise_values,
    split_rows,
    table_as_dict,
    to_frame,
)

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_core(batches: list[list[Msg]], split: list[int] | None = None, through_blob: bool = True):
    """Feed batches to the core like the Spark layer does: shuffled, in several frames, with the
    state round-tripped through its Arrow blob between batches. Returns (state, changes, violation)."""
    state = None
    changes = []
    for i, batch in enumerate(batches):
        frame = to_frame(batch)
        parts = (split or [1])[i % len(split or [1])]
        frames = [f for f in split_rows(frame.sample(frac=1, random_state=i), max(1, parts)) if len(f)]
        result = process_batch("sensor-1", "s1", frames, state, SCHEMA)
        if result.violation is not None:
            return state, changes, result.violation
        changes.append(result.changes)
        state = result.state
        if through_blob and state is not None:
            state.stored = read_table(dump_table(state.stored, SCHEMA), SCHEMA)  # as the Spark shell does
    return state, changes, None


def run_model(batches: list[list[Msg]]):
    model = Model()
    try:
        for b in batches:
            snapshot = copy.deepcopy(model)
            model.apply_batch(b)
    except ModelViolation as v:
        return snapshot, v
    return model, None


def replay_changes(changes: list[pd.DataFrame]) -> dict:
    table: dict = {}
    if not changes:
        return table
    log = concat_rows(changes)
    for _, ch in log.iterrows():
        if ch["op"] == "delete":
            table.pop(ch["row_id"], None)
        else:
            table[ch["row_id"]] = table_as_dict(pd.DataFrame([ch]).set_index("row_id"))[ch["row_id"]]
    return table


def model_table(model: Model) -> dict:
    return {rid: normalise_values(v) for rid, v in (model.table or {}).items()}


@PROFILE
@given(data=st.data(), split=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_valid_sessions_reconstruct_exactly_as_the_model(data, split):
    msgs = data.draw(valid_session(restarts=True))
    batches = data.draw(batches_of(msgs))
    state, changes, violation = run_core(batches, split)
    model, expected_violation = run_model(batches)

    assert expected_violation is None
    assert violation is None, str(violation)
    assert table_as_dict(state.table) == model_table(model)
    assert state.last_seq == msgs[-1].seq
    assert state.status is (SessionStatus.ENDED if msgs[-1].type == "end" else SessionStatus.OPEN)
    # row_changes replayed in seq order rebuild the table, and match the model's change log.
    assert replay_changes(changes) == model_table(model)
    log = concat_rows(changes)
    assert len(log) == len(model.changes)
    assert list(zip(log["seq"], log["row_id"], log["op"])) == [(s, r, o) for s, r, o, _ in model.changes]
    # current_rows keeps only each batch's last change per row: that alone rebuilds the table too.
    assert merge_last_changes(changes) == model_table(model)


@PROFILE
@given(data=st.data(), split=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_the_update_fast_path_agrees_with_the_general_path(data, split):
    """``process_batch`` takes a short path for plain update batches (of an open session, or after
    the snapshot that starts one): on every batch it takes, it must give exactly what the general
    path gives; and it must take every such valid batch, or the property above would not be
    testing it."""
    msgs = data.draw(valid_session(restarts=True))
    batches = data.draw(batches_of(msgs))
    state = None
    for i, batch in enumerate(batches):
        frame = to_frame(batch).sample(frac=1, random_state=i)
        parts = split[i % len(split)]
        df = pd.concat([f for f in split_rows(frame, parts) if len(f)], ignore_index=True)
        general = apply_in_kafka_order("sensor-1", "s1", df, copy.copy(state), SCHEMA, await_snapshot=False)
        arrow_in = state is not None and isinstance(state.stored, pa.Table)
        fast = apply_update_run(df, state, SCHEMA)
        ordered = sorted(batch, key=lambda m: m.seq)
        plain_updates = all(m.type == "update" and m.rows for m in ordered[state is None:])
        starts_fresh = state is None and ordered[0].type == "snapshot" and ordered[0].rows
        if plain_updates and (starts_fresh or (state is not None and state.status == SessionStatus.OPEN)):
            assert fast is not None
        if fast is not None:
            assert general.violation is None
            pd.testing.assert_frame_equal(fast.changes, general.changes)
            # A state read from its blob goes to the next blob in Arrow, never through pandas.
            assert isinstance(fast.state.stored, pa.Table) == arrow_in
            pd.testing.assert_frame_equal(fast.state.table, general.state.table)
            assert {k: v for k, v in vars(fast.state).items() if k != "stored"} == \
                {k: v for k, v in vars(general.state).items() if k != "stored"}
        state = general.state
        if state is not None and i % 2:  # as the Spark shell reads a state: its table in Arrow
            state = copy.copy(state)
            state.stored = read_table(dump_table(state.stored, SCHEMA), SCHEMA)


def merge_last_changes(changes: list[pd.DataFrame]) -> dict:
    """What the current_rows MERGE does with each batch: apply only the rows marked last."""
    table: dict = {}
    for batch in changes:
        last = batch[last_change_per_row(batch["row_id"])]
        assert not last["row_id"].duplicated().any()
        table.update(replay_changes([last]))
        for rid in last.loc[last["op"] == "delete", "row_id"]:
            table.pop(rid, None)
    return table


FAULTS = ["gap", "duplicate", "reorder_across_batches", "update_first", "partition_move",
          "after_end", "unknown_row", "malformed", "key_mismatch"]


@st.composite
def faulty(draw):
    """A valid session with one injected fault, cut into batches; and the kind the model expects."""
    msgs = draw(valid_session(max_messages=15, restarts=True))
    msgs = [m for m in msgs if m.type != "end"]
    fault = draw(st.sampled_from(FAULTS))
    last = msgs[-1]
    nxt = last.seq + 1
    if fault == "gap":
        msgs.append(Msg(seq=nxt + draw(st.integers(1, 5)), type="update", offset=last.offset + 1))
    elif fault == "duplicate":
        victim = draw(st.sampled_from(msgs))
        msgs.append(Msg(seq=victim.seq, type="update", offset=last.offset + 1))
    elif fault == "reorder_across_batches":
        msgs.append(Msg(seq=nxt, type="update", offset=last.offset + 1))
        msgs.append(Msg(seq=nxt + 1, type="update", offset=last.offset + 2))
        batches = draw(batches_of(msgs[:-2]))
        return batches + [[msgs[-1]], [msgs[-2]]], "GAP"
    elif fault == "update_first":
        msgs = [Msg(seq=msgs[0].seq - 1, type="update", offset=msgs[0].offset - 1,
                    rows=[{"id": "r1", "values": {}}])] + msgs
    elif fault == "partition_move":
        msgs.append(Msg(seq=nxt, type="update", partition=1, offset=5))
    elif fault == "after_end":
        msgs.append(Msg(seq=nxt, type="end", offset=last.offset + 1))
        msgs.append(Msg(seq=nxt + 1, type="update", offset=last.offset + 2))
    elif fault == "unknown_row":
        msgs.append(Msg(seq=nxt, type="update", offset=last.offset + 1,
                        rows=[{"id": "never-seen", "op": "delete"}]))
    elif fault == "malformed":
        msgs.append(Msg(seq=nxt, type="update", offset=last.offset + 1,
                        error="column 'temperature' expects double, got STRING \"hot\""))
    elif fault == "key_mismatch":
        msgs.append(Msg(seq=nxt, type="update", offset=last.offset + 1, key="someone-else"))
    batches = draw(batches_of(msgs))
    expected = {"gap": "GAP", "duplicate": "DUPLICATE", "update_first": "NO_SNAPSHOT",
                "partition_move": "PARTITION_MOVED", "after_end": "AFTER_END",
                "unknown_row": "UNKNOWN_ROW", "malformed": "MALFORMED",
                "key_mismatch": "MALFORMED"}[fault]
    return batches, expected


@PROFILE
@given(case=faulty(), split=st.lists(st.integers(1, 3), min_size=1, max_size=2))
def test_every_injected_fault_raises_its_kind_with_the_records_coordinates(case, split):
    batches, expected_kind = case
    _, _, violation = run_core(batches, split)
    _model, model_violation = run_model(batches)

    assert model_violation is not None and model_violation.kind == expected_kind
    assert violation is not None, "the core accepted a faulty stream"
    assert violation.kind == ViolationKind(expected_kind)
    assert violation.offset == model_violation.offset
    assert violation.found_seq == model_violation.seq
    assert violation.topic == "sensor-1" and violation.session == "s1"
    text = str(violation)
    assert text.startswith(f"INTEGRITY VIOLATION {expected_kind} topic=sensor-1 partition=")
    assert f"offset={model_violation.offset}" in text and "session=s1" in text


def test_gap_message_names_expected_and_found_seq():
    batches = [[Msg(0, "snapshot", offset=10)], [Msg(1, "update", offset=11), Msg(4, "update", offset=14)]]
    _, _, v = run_core(batches)
    assert str(v).startswith(
        "INTEGRITY VIOLATION GAP topic=sensor-1 partition=0 offset=14 session=s1 expected_seq=2 found_seq=4")


def test_await_snapshot_skips_updates_until_the_next_snapshot():
    msgs = [Msg(7, "update", rows=[{"id": "a", "values": {"status": "x"}}], offset=1),
            Msg(8, "snapshot", rows=[{"id": "b", "values": {"status": "y"}}], offset=2),
            Msg(9, "update", rows=[{"id": "b", "op": "delete"}], offset=3)]
    result = process_batch("t", "s1", [to_frame(msgs)], None, SCHEMA, await_snapshot=True)
    assert result.violation is None
    assert result.skipped == 1
    assert result.state.table.empty and result.state.first_seq == 8 and result.state.last_seq == 9
    strict = process_batch("t", "s1", [to_frame(msgs)], None, SCHEMA)
    assert strict.violation.kind is ViolationKind.NO_SNAPSHOT


def test_snapshot_drops_rows_absent_from_it_as_deletes():
    first = Msg(0, "snapshot", rows=[{"id": "a", "values": {}}, {"id": "b", "values": {}}], offset=1)
    resync = Msg(1, "snapshot", rows=[{"id": "b", "values": {"status": "ok"}}], offset=2)
    state, changes, v = run_core([[first], [resync]])
    assert v is None
    last = changes[-1]
    assert list(zip(last["row_id"], last["op"], last["type"])) == [
        ("a", "delete", "snapshot"), ("b", "upsert", "snapshot")]
    assert list(state.table.index) == ["b"] and state.snapshot_seq == 1 and state.snapshot_offset == 2


def test_blob_keeps_its_schema_so_an_added_nullable_column_reads_as_null():
    from reconstructor.contract.row_schema import RowSchema

    state, _, _ = run_core([[Msg(0, "snapshot", rows=[{"id": "a", "values": {"temperature": 1.5,
                                                                              "reading_count": 2**60}}])]])
    blob = dump_table(state.table, SCHEMA)
    wider = RowSchema.from_dict({"name": "v2", "columns": [
        {"name": c.name, "type": c.type} for c in SCHEMA.columns] + [{"name": "battery", "type": "double"}]})
    loaded = load_table(blob, wider)
    assert list(loaded.columns) == wider.names
    assert loaded.loc["a", "temperature"] == 1.5
    assert loaded.loc["a", "reading_count"] == 2**60  # longs stay exact through the blob
    assert pd.isna(loaded.loc["a", "battery"])


def test_blob_refuses_a_lossy_type_change():
    from reconstructor.contract.row_schema import RowSchema
    from reconstructor.errors import SchemaError

    state, _, _ = run_core([[Msg(0, "snapshot", rows=[{"id": "a", "values": {"status": "ok"}}])]])
    blob = dump_table(state.table, SCHEMA)
    changed = RowSchema.from_dict({"name": "v2", "columns": [
        {"name": c.name, "type": "double" if c.name == "status" else c.type} for c in SCHEMA.columns]})
    with pytest.raises(SchemaError, match="status"):
        load_table(blob, changed)


@pytest.mark.parametrize("rows", [0, 3, 1500])
def test_blob_round_trips_every_column_type_with_nulls_in_canonical_dtypes(rows):
    from reconstructor.contract.row_schema import TYPES, RowSchema
    from reconstructor.core.frames import coerce_columns

    schema = RowSchema.from_dict({"name": "all", "columns": [{"name": f"c_{t}", "type": t} for t in TYPES]})
    values = {"c_string": ["x", None, "ü"], "c_double": [1.5, None, -0.0], "c_long": [2**60, None, -1],
              "c_boolean": [True, None, False],
              "c_timestamp": [pd.Timestamp("2026-11-21 10:00:00.123456"), None, pd.Timestamp("1970-01-01")]}
    table = coerce_columns(pd.DataFrame({k: np.array((v * 500)[:rows], dtype=object) for k, v in values.items()},
                                        index=pd.Index([f"r{i}" for i in range(rows)], name="row_id")), schema)
    loaded = load_table(dump_table(table, schema), schema)
    assert dict(loaded.dtypes.astype(str)) == {"c_string": "object", "c_double": "float64", "c_long": "Int64",
                                               "c_boolean": "boolean", "c_timestamp": "datetime64[ns]"}
    pd.testing.assert_frame_equal(loaded, table.astype({"c_timestamp": "datetime64[ns]"}))


def test_only_large_tables_are_compressed_in_the_blob(monkeypatch):
    """Small tables skip zstd (it costs more than the rest of the dump; Spark lz4-compresses the
    changelog anyway), large ones keep the state store small."""
    from reconstructor.core import blob

    def tables(rows):
        return pd.DataFrame({"temperature": [20.5] * rows, "pressure": [1.0] * rows, "humidity": [0.5] * rows,
                             "status": ["ok"] * rows, "reading_count": pd.array(range(rows), dtype="Int64"),
                             "calibrated_at": pd.Series([pd.Timestamp("2026-11-22")] * rows, dtype="datetime64[ns]")},
                            index=pd.Index([f"row-{i}" for i in range(rows)], name="row_id"))

    small, large = tables(blob.COMPRESS_FROM_ROWS - 1), tables(blob.COMPRESS_FROM_ROWS)
    sizes = {n: len(dump_table(t, SCHEMA)) for n, t in (("small", small), ("large", large))}
    monkeypatch.setattr(blob, "COMPRESS_FROM_ROWS", 10**9)
    plain = {n: len(dump_table(t, SCHEMA)) for n, t in (("small", small), ("large", large))}
    assert sizes["small"] == plain["small"]
    assert sizes["large"] < plain["large"] / 4
    pd.testing.assert_frame_equal(load_table(dump_table(large, SCHEMA), SCHEMA), large)


def test_a_record_without_a_kafka_key_is_malformed_on_an_open_session_too():
    state, _, _ = run_core([[Msg(0, "snapshot", rows=[{"id": "a", "values": {}}], offset=1)]])
    frame = to_frame([Msg(1, "update", rows=[{"id": "a", "values": {"status": "ok"}}], offset=2)])
    assert process_batch("t", "s1", [frame], state, SCHEMA).violation is None
    for missing in (["key"], ["key", "session"]):  # None == None must not pass for a match
        broken = frame.assign(**{c: None for c in missing})
        result = process_batch("t", "s1", [broken], state, SCHEMA)
        assert result.violation.kind is ViolationKind.MALFORMED and result.violation.offset == 2


def test_an_update_in_arrow_gives_the_table_the_pandas_update_gives_for_every_column_type():
    """The short path updates a table read from its blob in Arrow; the general path in pandas.
    Both must give the same table, for every column type and with nulls (upsert, re-upsert,
    delete, new row)."""
    from reconstructor.contract.row_schema import TYPES, RowSchema
    from reconstructor.core.blob import to_frame
    from reconstructor.core.frames import coerce_columns
    from reconstructor.core.table import apply_updates, columns_of

    schema = RowSchema.from_dict({"name": "all", "columns": [{"name": f"c_{t}", "type": t} for t in TYPES]})
    values = {"c_string": ["x", None, "ü", "y"], "c_double": [1.5, None, -0.0, 2.0], "c_long": [2**60, None, -1, 7],
              "c_boolean": [True, None, False, True],
              "c_timestamp": [pd.Timestamp("2026-11-21 10:00:00.123456"), None, pd.Timestamp("1970-01-01"),
                              pd.Timestamp("2026-11-22")]}

    def frame(ids):
        return coerce_columns(pd.DataFrame({k: np.array(v[:len(ids)], dtype=object) for k, v in values.items()},
                                           index=pd.Index(ids, name="row_id")), schema)

    table = frame(["a", "b", "c"])
    ops = frame(["b", "d", "a", "b"]).reset_index()
    ops["op"] = ["upsert", "upsert", "delete", "upsert"]
    ops = ops.assign(partition=0, offset=np.arange(4), seq=np.arange(4), row_pos=0)
    ops = ops.iloc[[1, 0, 2, 3]].reset_index(drop=True)  # values differ from the table's rows
    in_pandas = apply_updates(ops, table, schema.names)
    in_arrow = apply_updates(columns_of(ops), read_table(dump_table(table, schema), schema), schema.names)
    assert isinstance(in_arrow, pa.Table)
    assert list(in_pandas.index) == ["c", "d", "b"]
    assert in_pandas.loc["c"].notna().all() and in_pandas.loc["b"].notna().all() and in_pandas.loc["d"].isna().all()
    pd.testing.assert_frame_equal(to_frame(in_arrow), in_pandas)
    pd.testing.assert_frame_equal(load_table(dump_table(in_arrow, schema), schema), in_pandas)
