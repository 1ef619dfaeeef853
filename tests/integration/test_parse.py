"""Spark's parse of Kafka values: every malformed shape gets its own reason, valid ones none.

Runs ``parse_records`` on a DataFrame with the Kafka source's columns (the parse is a pure Spark
expression over them), so each case is one row and the whole table runs in one job.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from reconstructor.schema import RowSchema
from reconstructor.spark.parse import parse_records

pytestmark = pytest.mark.integration
TS = "2026-11-21T10:00:00Z"


_NO_ROWS = object()


def _msg(rows=_NO_ROWS, **over) -> str:
    m = {"session": "s1", "seq": 1, "type": "update", "ts": TS}
    if rows is not _NO_ROWS:
        m["rows"] = rows
    m.update(over)
    return json.dumps(m)


CASES = [
    ("valid update", _msg([{"id": "a", "values": {"temperature": 1.5, "status": "ok", "reading_count": 3}},
                           {"id": "b", "op": "delete"}]), None),
    ("valid snapshot with null values", _msg([{"id": "a", "values": None}], type="snapshot"), None),
    ("valid end", _msg(type="end"), None),
    ("rows null is no rows", _msg(None), None),
    ("integer for a double", _msg([{"id": "a", "values": {"temperature": 2}}]), None),
    ("not JSON", "{not json", "value is not valid JSON"),
    ("JSON array", "[1, 2]", "value is a JSON ARRAY"),
    ("unknown envelope field", _msg([], extra=1), "unknown field extra"),
    ("session not a string", _msg([], session=5), "session must be a string"),
    ("seq not an integer", _msg([], seq="7"), "seq must be an integer"),
    ("negative seq", _msg([], seq=-1), "seq must not be negative"),
    ("unknown type", _msg([], type="upsert"), 'type must be snapshot, update or end, got "upsert"'),
    ("bad ts", _msg([], ts="yesterday"), "ts must be an RFC 3339 timestamp string"),
    ("rows not an array", _msg({"id": "a"}), "rows must be an array"),
    ("end with rows", _msg([{"id": "a", "op": "delete"}], type="end"), "an end message carries no rows"),
    ("row not an object", _msg([5]), "rows[0] is not an object"),
    ("unknown row field", _msg([{"id": "a", "colour": 1}]), "rows[0] has unknown field colour"),
    ("empty id", _msg([{"id": "", "values": {}}]), "rows[0].id must be a non-empty string"),
    ("bad op", _msg([{"id": "a", "op": "merge"}]), "rows[0].op must be upsert or delete"),
    ("delete with values", _msg([{"id": "a", "op": "delete", "values": {"status": "x"}}]),
     "rows[0] is a delete and carries values"),
    ("values not an object", _msg([{"id": "a", "values": [1]}]), "rows[0].values must be an object"),
    ("unknown column", _msg([{"id": "a", "values": {"colour": "red"}}]), "rows[0].values has unknown column colour"),
    ("string for a double", _msg([{"id": "a", "values": {"temperature": "hot"}}]),
     'rows[0].values.temperature expects double, got STRING "hot"'),
    ("double for a long", _msg([{"id": "a", "values": {"reading_count": 1.5}}]),
     "rows[0].values.reading_count expects long, got DECIMAL"),
    ("bad timestamp", _msg([{"id": "a", "values": {"calibrated_at": "soon"}}]),
     'rows[0].values.calibrated_at expects timestamp, got STRING "soon"'),
    ("second row bad", _msg([{"id": "a"}, {"id": "b", "values": {"status": 1}}]),
     "rows[1].values.status expects string, got BIGINT 1"),
]


def test_each_malformed_shape_has_its_reason_and_valid_ones_none(spark):
    kafka_ts = dt.datetime(2026, 11, 21, 10, 0, 0)
    records = [("parse-t", 0, i, kafka_ts, b"s1", value.encode()) for i, (_, value, _) in enumerate(CASES)]
    df = spark.createDataFrame(records, "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                                        "key BINARY, value BINARY")
    parsed = parse_records(df, RowSchema.load()).select("offset", "row_pos", "error").collect()
    errors: dict[int, set] = {}
    for r in parsed:
        errors.setdefault(r.offset, set()).add(r.error)
    for i, (name, _, reason) in enumerate(CASES):
        found = {e for e in errors[i] if e is not None}
        if reason is None:
            assert not found, (name, found)
        else:
            assert any(e.startswith(reason) for e in found), (name, reason, found)


def test_valid_values_come_out_typed_and_exact(spark):
    """Each JSON shape a valid field may take reads as its exact typed value: integers stored
    small or large, decimals and exponents read as doubles, strings as stored, timestamps with
    offsets normalised to UTC, JSON null and absent columns as null."""
    rows = [
        {"id": "a", "values": {"temperature": 21, "pressure": 1013.25, "humidity": 4.5e-3,
                               "status": "ok \"quoted\" é", "reading_count": 7,
                               "calibrated_at": "2026-11-21T11:30:00+01:00"}},
        {"id": "b", "values": {"temperature": -0.1, "pressure": None, "reading_count": 9007199254740993,
                               "calibrated_at": "2026-11-21T10:00:00.123456Z"}},
        {"id": "c", "op": "delete"},
    ]
    value = _msg(rows, seq=3000000000, ts="2026-11-21T09:59:59.5Z")
    df = spark.createDataFrame([("parse-t", 0, 0, dt.datetime(2026, 11, 21, 10), b"s1", value.encode())],
                               "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                               "key BINARY, value BINARY")
    out = {r.row_id: r for r in parse_records(df, RowSchema.load()).collect()}
    assert {r.error for r in out.values()} == {None}
    a, b, c = out["a"], out["b"], out["c"]
    assert (a.seq, a.type, a.session, a.op) == (3000000000, "update", "s1", "upsert")
    assert a.event_ts == dt.datetime(2026, 11, 21, 9, 59, 59, 500000)
    assert (a.temperature, a.pressure, a.humidity) == (21.0, 1013.25, 4.5e-3)
    assert isinstance(a.temperature, float)
    assert a.status == 'ok "quoted" é'
    assert a.reading_count == 7
    assert a.calibrated_at == dt.datetime(2026, 11, 21, 10, 30)
    assert (b.temperature, b.pressure, b.humidity, b.status) == (-0.1, None, None, None)
    assert b.reading_count == 9007199254740993
    assert b.calibrated_at == dt.datetime(2026, 11, 21, 10, 0, 0, 123456)
    assert c.op == "delete" and c.temperature is None and c.reading_count is None
