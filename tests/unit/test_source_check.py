"""``verify --against-kafka``'s rule for one record, pure: a record parsed as the pipeline parses it,
held to the ``row_changes`` and ``violations`` rows at its offset."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest

from reconstructor.audit.source_check import (
    APPLIED,
    BOTH,
    MISSING,
    NOTHING,
    RECORDED,
    SourceRecord,
    SourceSummary,
    judge,
    row_schema_of,
    source_record,
)
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import ROW_CHANGES, VIOLATIONS, hour_of
from reconstructor.core.record_parse import KafkaRecord

SCHEMA = RowSchema.load()
NAMES = SCHEMA.names
TS = dt.datetime(2026, 11, 28, 8, 30, tzinfo=dt.UTC)


def record(kind: str = "update", rows: list[dict] | None = None, seq: int = 5, offset: int = 40,
           value: bytes | None = None, session: str = "s1") -> SourceRecord:
    message: dict[str, Any] = {"session": session, "seq": seq, "type": kind, "ts": "2026-11-28T08:30:00Z"}
    if rows is not None:
        message["rows"] = rows
    raw = value if value is not None else json.dumps(message).encode()
    return source_record(KafkaRecord("sensor-1", 0, offset, TS, session.encode(), raw), SCHEMA)


def aware(v: Any) -> Any:
    """A time as delta-rs reads one from a table: aware UTC."""
    return v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else v


def changes_of(r: SourceRecord) -> list[dict[str, Any]]:
    """The ``row_changes`` rows the pipeline writes for ``r``."""
    return [{"session": r.session, "seq": r.seq, "type": r.type, "event_ts": aware(r.event_ts), "offset": r.offset,
             "row_pos": row.row_pos, "row_id": row.row_id, "op": row.op,
             **{n: aware(v) for n, v in zip(NAMES, row.values)}} for row in r.rows]


def violation(r: SourceRecord, kind: str, **override) -> dict[str, Any]:
    return {"session": r.session, "kind": kind, "offset": r.offset, "found_seq": r.seq, "value": r.value, **override}


UPDATE = [{"id": "r1", "values": {"temperature": 21.5, "status": "ok", "calibrated_at": "2026-11-01T00:00:00Z"}},
          {"id": "r2", "op": "delete"}]
SNAPSHOT = [{"id": "r1", "values": {"temperature": 20.0}}, {"id": "r3", "values": {"reading_count": 2**62 + 1}}]


def test_an_update_whose_rows_are_its_changes_is_applied():
    r = record(rows=UPDATE)
    assert judge(r, changes_of(r), [], NAMES).outcome == APPLIED


def test_a_change_missing_from_the_log_is_named_by_its_row_and_place():
    r = record(rows=UPDATE)
    verdict = judge(r, changes_of(r)[:1], [], NAMES)
    assert verdict.outcome is None and verdict.table == ROW_CHANGES and verdict.row_id == "r2"
    assert verdict.detail == "the update record at partition 0 offset 40: row_changes lacks its row at row_pos 1"


@pytest.mark.parametrize("column, logged, words", [
    ("temperature", 21.4, "temperature is 21.4 in row_changes, 21.5 in the record"),
    ("status", None, "status is None in row_changes, 'ok' in the record"),
    ("op", "upsert", "row_pos 1 is upsert 'r2' in row_changes, delete 'r2' in the record"),
    ("calibrated_at", dt.datetime(2026, 11, 1, 0, 0, 1, tzinfo=dt.UTC), "calibrated_at is"),
    ("seq", 6, "has seq 6, the record 5"),
    ("session", "s2", "has session 's2', the record 's1'"),
])
def test_a_change_that_differs_from_the_record_is_named(column, logged, words):
    r = record(rows=UPDATE)
    changes = changes_of(r)
    changes[0 if column != "op" else 1][column] = logged
    verdict = judge(r, changes, [], NAMES)
    assert verdict.outcome is None and verdict.row_id in ("r1", "r2") and words in str(verdict.detail)


def test_a_change_the_record_does_not_carry_is_named():
    r = record(rows=UPDATE)
    extra = {**changes_of(r)[0], "row_pos": 2, "row_id": "r9"}
    verdict = judge(r, [*changes_of(r), extra], [], NAMES)
    assert verdict.outcome is None and verdict.row_id == "r9" and "row_pos 2" in str(verdict.detail)


def test_a_record_set_aside_has_its_violation_row_and_no_change():
    r = record(rows=UPDATE)
    assert judge(r, [], [violation(r, "SKIPPED")], NAMES).outcome == RECORDED
    verdict = judge(r, changes_of(r), [violation(r, "SKIPPED")], NAMES)
    assert verdict.outcome is None and verdict.table == VIOLATIONS and "SKIPPED" in str(verdict.detail)


def test_a_record_with_rows_that_neither_table_shows_is_missing():
    r = record(rows=UPDATE)
    assert judge(r, [], [], NAMES).outcome == MISSING


@pytest.mark.parametrize("kind, rows", [("update", None), ("update", []), ("end", None)])
def test_a_message_with_no_rows_leaves_nothing_or_a_violation(kind, rows):
    r = record(kind, rows)
    assert judge(r, [], [], NAMES).outcome == NOTHING
    assert judge(r, [], [violation(r, "AFTER_END")], NAMES).outcome == RECORDED


def test_a_drifted_snapshot_has_its_changes_its_dropped_rows_and_its_drift_row():
    r = record("snapshot", SNAPSHOT)
    dropped = {**changes_of(r)[0], "row_pos": -1, "row_id": "r2", "op": "delete", **dict.fromkeys(NAMES)}
    drift = violation(r, "SNAPSHOT_DRIFT", value=None)
    assert judge(r, [*changes_of(r), dropped], [drift], NAMES).outcome == BOTH
    assert judge(r, [*changes_of(r), dropped], [], NAMES).outcome == APPLIED
    assert judge(r, [], [drift], NAMES).outcome is None  # a drifted snapshot applies


def test_only_a_snapshot_drops_rows_and_never_one_it_carries():
    snap = record("snapshot", SNAPSHOT)
    carried = {**changes_of(snap)[0], "row_pos": -1, "op": "delete", **dict.fromkeys(NAMES)}
    assert "yet the snapshot carries it" in str(judge(snap, [*changes_of(snap), carried], [], NAMES).detail)
    update = record(rows=UPDATE)
    dropped = {**changes_of(update)[0], "row_pos": -1, "row_id": "r7", "op": "delete"}
    assert "row_pos -1" in str(judge(update, [*changes_of(update), dropped], [], NAMES).detail)


def test_a_gap_resyncs_only_a_snapshot():
    snap, update = record("snapshot", SNAPSHOT), record(rows=UPDATE)
    assert judge(snap, changes_of(snap), [violation(snap, "GAP")], NAMES).outcome == BOTH
    assert judge(update, changes_of(update), [violation(update, "GAP")], NAMES).outcome is None


def test_a_malformed_record_is_a_violation_row_never_a_change():
    r = record(value=b"not json")
    assert r.error == "value is not valid JSON" and r.session is None
    assert judge(r, [], [violation(r, "MALFORMED", session=None)], NAMES).outcome == RECORDED
    assert judge(r, [], [], NAMES).outcome == MISSING
    bad = record(rows=[{"id": "r1", "values": {"temperature": "hot"}}])
    assert bad.error is not None and bad.rows
    assert judge(bad, changes_of(bad), [violation(bad, "MALFORMED")], NAMES).outcome is None


@pytest.mark.parametrize("field, other", [("session", "s2"), ("found_seq", 9), ("value", "{}")])
def test_a_violation_row_of_another_record_at_the_offset_is_named(field, other):
    r = record(rows=UPDATE)
    verdict = judge(r, [], [violation(r, "SKIPPED", **{field: other})], NAMES)
    assert verdict.outcome is None and verdict.table == VIOLATIONS


def test_a_loss_row_at_the_offset_is_not_the_record():
    r = record(rows=UPDATE)
    assert judge(r, changes_of(r), [violation(r, "DATA_LOSS", session=None, found_seq=None)], NAMES).outcome == APPLIED


def test_the_row_schema_is_read_off_the_change_log_and_the_hour_is_the_kafka_timestamp():
    arrow = pa.schema([("temperature", pa.float64()), ("status", pa.string_view()), ("n", pa.int64()),
                       ("ok", pa.bool_()), ("at", pa.timestamp("us", tz="UTC"))])
    assert [(c.name, c.type) for c in row_schema_of(arrow, arrow.names).columns] == [
        ("temperature", "double"), ("status", "string"), ("n", "long"), ("ok", "boolean"), ("at", "timestamp")]
    assert hour_of(dt.datetime(2026, 11, 28, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-2)))) == "2026-11-29-01"


def test_the_summary_counts_what_was_not_checked_apart():
    summary = SourceSummary(before_start=2, awaiting=1, gone=10, past=4)
    summary.outcomes[APPLIED] = 5
    first, second = summary.lines(0.5)
    assert first.startswith("against Kafka: 5 records checked (5 with changes, 0 in violations, 0 both, "
                            "0 with nothing to write) in 0.5s, 10 records/s")
    assert second.startswith("  not checked: 3 records (2 before")
    assert "10 offsets no longer in Kafka, 4 offsets past the writer's committed ones" in second


def test_a_walk_over_small_tables_counts_each_outcome_and_names_a_row_kafka_does_not_hold(tmp_path):
    """``SourceCheck`` over tables delta-rs wrote: the rows at each record's offset, read per hour;
    a record before the partition's first trace is not checked; a row where Kafka holds no record
    is named."""
    from deltalake import write_deltalake

    from reconstructor.audit.delta_tables import OutputTables
    from reconstructor.audit.source_check import SourceCheck
    from reconstructor.settings import S3Settings

    snap, update, end = record("snapshot", SNAPSHOT, seq=0, offset=3), record(rows=UPDATE, seq=1, offset=4), \
        record("end", seq=2, offset=6)
    before = record("snapshot", SNAPSHOT, seq=0, offset=1, session="s0")
    logged = [{**c, "topic": "sensor-1", "partition": 0, "hour": "2026-11-28-08"}
              for r in (snap, update) for c in changes_of(r)]
    stray = {**logged[-1], "offset": 5, "seq": 9}
    types = {"temperature": pa.float64(), "pressure": pa.float64(), "humidity": pa.float64(),
             "status": pa.string(), "reading_count": pa.int64(), "calibrated_at": pa.timestamp("us", tz="UTC"),
             "event_ts": pa.timestamp("us", tz="UTC"), "row_pos": pa.int32(), "partition": pa.int32()}

    def changes_table(rows):
        names = list(rows[0])
        return pa.table({n: pa.array([r[n] for r in rows], types.get(n)) for n in names})

    write_deltalake(str(tmp_path / "row_changes"), changes_table(logged), partition_by=["hour"])
    write_deltalake(str(tmp_path / "violations"), pa.table({
        "topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
        "session": pa.array([], pa.string()), "kind": pa.array([], pa.string()),
        "found_seq": pa.array([], pa.int64()), "value": pa.array([], pa.string())}))
    tables = OutputTables(str(tmp_path), S3Settings())
    tp = ("sensor-1", 0)

    def kafka(r: SourceRecord) -> KafkaRecord:
        return KafkaRecord(r.topic, r.partition, r.offset, TS, (r.session or "").encode(), (r.value or "").encode())

    check = SourceCheck(tables, {tp: 7}, {tp: (1, 9)})
    assert (check.starts, check.read_ends, check.summary.gone, check.summary.past) == ({tp: 1}, {tp: 7}, 1, 2)
    assert check.add([kafka(r) for r in (before, snap, update, end)]) is None
    assert (check.summary.before_start, check.summary.outcomes[APPLIED], check.summary.outcomes[NOTHING]) == (1, 2, 1)
    assert check.finish() is None

    write_deltalake(str(tmp_path / "row_changes"), changes_table([stray]), partition_by=["hour"], mode="append")
    check = SourceCheck(OutputTables(str(tmp_path), S3Settings()), {tp: 7}, {tp: (1, 9)})
    found = check.add([kafka(r) for r in (before, snap, update, end)])
    assert found is not None and found.line() == (
        "VERIFY FAILED row_changes topic=sensor-1 session=s1 seq=9 row=r2: a row at partition 0 offset 5, where "
        "Kafka holds no committed record")
