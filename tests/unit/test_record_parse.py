"""The parse of one Kafka record without Spark: every malformed shape gets Spark's reason, valid values
come out typed and exact.  (``tests/integration/test_parse.py`` holds it equal to Spark's parse.)"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.record_parse import COLUMNS, KafkaRecord, java_double, parse_frame, parse_record
from tests.integration.test_parse import CASES, LONG_STRINGS, RANGE, TS, Raw, _message, _msg

SCHEMA = RowSchema.load()
KAFKA_TS = dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC)


def _record(value, offset: int = 0, key: bytes | None = b"s1", kafka_ts: dt.datetime = KAFKA_TS) -> KafkaRecord:
    if isinstance(value, Raw):
        key, data = value
    else:
        data = value.encode() if isinstance(value, str) else value
    return KafkaRecord("parse-t", 0, offset, kafka_ts, key, data)


def _errors(value, **kw) -> set:
    return {r["error"] for r in parse_record(_record(value, **kw), SCHEMA)}


@pytest.mark.parametrize(("name", "value", "reason"), CASES, ids=[c[0] for c in CASES])
def test_each_case_has_its_reason(name, value, reason):
    found = {e for e in _errors(value) if e is not None}
    if reason is None:
        assert not found, (name, found)
    else:
        assert any(e.startswith(reason) for e in found), (name, reason, found)


def test_rows_have_the_columns_of_the_spark_parse_in_order():
    [row] = parse_record(_record(_msg(type="end")), SCHEMA, keep_value=True)
    assert list(row) == [*COLUMNS, *SCHEMA.names, "value"]
    assert (row["row_pos"], row["op"], row["group_session"], row["value"]) == (None, "upsert", "s1", _msg(type="end"))


def test_valid_values_come_out_typed_and_exact():
    odd = "\x00\u00e9\u2028\uffff\U0001F600\U00020000\U000E0001\U0010FFFF"
    rows = [
        {"id": "a", "values": {"temperature": 21, "pressure": 1013.25, "humidity": 5e-324, "status": odd,
                               "reading_count": 9007199254740993, "calibrated_at": "2026-11-21T11:30:00.1234567+01:00"}},
        {"id": odd, "values": {"temperature": -0.0, "pressure": None, "reading_count": -2**63,
                               "humidity": 1.7976931348623157e308}},
        {"id": "c", "op": "delete"},
    ]
    out = {r["row_id"]: r for r in parse_record(_record(_msg(rows, seq=2**63 - 1, ts="2026-11-21T09:59:59.5Z")), SCHEMA)}
    a, b, c = out["a"], out[odd], out["c"]
    assert {r["error"] for r in out.values()} == {None}
    assert (a["seq"], a["type"], a["session"], a["op"], a["row_pos"]) == (2**63 - 1, "update", "s1", "upsert", 0)
    assert a["event_ts"] == dt.datetime(2026, 11, 21, 9, 59, 59, 500000)
    assert a["kafka_ts"] == dt.datetime(2026, 11, 21, 10)
    assert type(a["temperature"]) is float and a["temperature"] == 21.0
    assert (a["pressure"], a["humidity"], a["status"]) == (1013.25, 5e-324, odd)
    assert a["reading_count"] == 9007199254740993
    assert a["calibrated_at"] == dt.datetime(2026, 11, 21, 10, 30, 0, 123456)
    # A valid message is read as Spark's fast path reads it (Jackson), which keeps -0.0's sign; the
    # exhaustive reading takes it as a decimal zero, which has none.
    assert struct.pack("<d", b["temperature"]) == struct.pack("<d", -0.0)
    record = _record(_msg(rows, seq=2**63 - 1, ts="2026-11-21T09:59:59.5Z"))
    exhaustive = {r["row_id"]: r for r in parse_record(record, SCHEMA, fast_path=False)}
    assert struct.pack("<d", exhaustive[odd]["temperature"]) == struct.pack("<d", 0.0)
    assert (b["pressure"], b["reading_count"], b["humidity"]) == (None, -2**63, 1.7976931348623157e308)
    assert (c["op"], c["temperature"], c["reading_count"]) == ("delete", None, None)


@pytest.mark.parametrize(("value", "reason"), [
    ('{"reading_count": 1.50}', "DECIMAL(2,1) 1.5"),
    ('{"reading_count": 100.0}', "DECIMAL(3,0) 100"),
    ('{"reading_count": 1e23}', "DOUBLE 9.999999999999999E22"),
    ('{"reading_count": 9223372036854775808}', "DECIMAL(19,0) 9223372036854775808"),
    ('{"reading_count": 1e309}', 'DOUBLE "Infinity"'),
    ('{"reading_count": [1, 2.5, 1e3]}', "ARRAY<DOUBLE> [1,2.5,1000.0]"),
    ('{"reading_count": [1, 2.25, null]}', "ARRAY<DECIMAL(22,2)> [1,2.25,null]"),
    ('{"reading_count": [{"b": 1, "a b": "x"}, {"c": [1, "y"]}]}',
     'ARRAY<OBJECT<`a b`: STRING, b: BIGINT, c: ARRAY<VARIANT>>> [{"a b":"x","b":1},{"c":[1,"y"]}]'),
    ('{"status": "tab\\tquote\\" \\u001f é"}', None),
    ('{"status": {"\\uffff": 1, "\\ud83d\\ude00": 2, "B": 3}}', 'OBJECT<B: BIGINT, `😀`: BIGINT, `\uffff`: BIGINT> {"B":3'),
])
def test_wrong_types_are_named_as_spark_names_them(value, reason):
    errors = _errors('{"session":"s1","seq":1,"type":"update","ts":"%s","rows":[{"id":"a","values":%s}]}' % (TS, value))
    column = next(iter(json.loads(value)))
    expects = "long" if column == "reading_count" else "string"
    if reason is None:
        assert errors == {None}
    else:
        [error] = errors
        assert error.startswith(f"rows[0].values.{column} expects {expects}, got {reason}"), error


def test_a_negative_double_zero_keeps_its_sign():
    [row] = parse_record(_record(_msg([{"id": "a", "values": {"temperature": 0}}]).replace(": 0}", ": -1e-400}")),
                         SCHEMA)
    assert row["error"] is None and struct.pack("<d", row["temperature"]) == struct.pack("<d", -0.0)


def test_a_wrong_value_is_quoted_by_its_first_60_characters():
    [error] = _errors(_msg([{"id": "a", "values": {"status": ["x" * 100]}}]))
    assert error == 'rows[0].values.status expects string, got ARRAY<STRING> ["' + "x" * 58


@pytest.mark.parametrize(("text", "valid"), [
    ('{"a":1,"a":2}', False), ("NaN", False), ("[1,]", False), ('"\\ud800"', False), ('"a\tb"', False),
    ("{} x", False), ("{}]", False), ("\ufeff{}", False), (" {}\n", True), ("[" * 999 + "]" * 999, True),
    ("[" * 1000 + "]" * 1000, False), ("1" * 1000, True), ("1" * 1001, False), ("1.5e" + "1" * 998, True),
    ("1.5e" + "1" * 999, False), ('"\\ud83d\\ude00"', True), ("01", False), ("-0", True),
])
def test_json_is_read_as_strictly_as_spark_reads_it(text, valid):
    errors = _errors(text)
    assert (errors != {"value is not valid JSON"}) == valid, errors


def test_bad_utf8_is_the_records_error_and_is_replaced():
    [row] = parse_record(_record(Raw((b"\xff\xfes", b"\xc3\x28"))), SCHEMA, keep_value=True)
    assert row["error"] == "Kafka key is not valid UTF-8"
    assert (row["key"], row["group_session"], row["value"]) == ("\ufffd\ufffds", "\ufffd\ufffds", "\ufffd(")
    [row] = parse_record(_record(Raw((None, b"{\xed\xa0\x80}"))), SCHEMA, keep_value=True)
    assert (row["error"], row["key"], row["group_session"], row["value"]) == (
        "Kafka value is not valid UTF-8", None, None, "{\ufffd\ufffd\ufffd}")


@pytest.mark.parametrize(("kafka_ts", "reason"), [
    (dt.datetime(2300, 1, 1, tzinfo=dt.UTC), f"Kafka timestamp 10413792000000 ms {RANGE}"),
    (dt.datetime(1600, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC), f"Kafka timestamp -11676095999999 ms {RANGE}"),
    (dt.datetime(2262, 4, 11, tzinfo=dt.UTC), None),
])
def test_a_kafka_time_out_of_range_is_the_records_error(kafka_ts, reason):
    [row] = parse_record(_record(_msg(type="end"), kafka_ts=kafka_ts), SCHEMA)
    assert row["error"] == reason
    assert row["kafka_ts"] == (None if reason else kafka_ts.replace(tzinfo=None))


@pytest.mark.parametrize(("ts", "reason"), [
    ("0000-01-01T00:00:00Z", f"ts 0000-01-01T00:00:00Z {RANGE}"),
    ("0001-01-01T00:00:00+01:00", f"ts 0001-01-01T00:00:00+01:00 {RANGE}"),
    ("2026-11-21T24:00:00Z", "ts must be an RFC 3339 timestamp string"),
    ("2026-02-29T00:00:00Z", "ts must be an RFC 3339 timestamp string"),
    ("2262-04-10T23:59:60Z", None),
    ("2026-11-21t10:00:00.9999999z", None),
])
def test_times_are_read_as_the_spark_expression_reads_them(ts, reason):
    assert _errors(_msg(ts=ts, type="end")) == {reason}


@pytest.mark.parametrize(("value", "text"), [
    (1e23, "9.999999999999999E22"), (2.82879384806159e17, "2.82879384806159008E17"), (5e-324, "4.9E-324"),
    (1e-3, "0.001"), (1e7, "1.0E7"), (-0.0, "-0.0"), (100.0, "100.0"), (0.1 + 0.2, "0.30000000000000004"),
])
def test_doubles_print_as_java_17_prints_them(value, text):
    assert java_double(value) == text


def test_frame_has_the_cores_dtypes():
    values = [_msg([{"id": "a", "values": {"reading_count": 2**62, "calibrated_at": TS}}, {"id": "b"}]), "{x"]
    frame = parse_frame([_record(v, offset=i) for i, v in enumerate(values)], SCHEMA, keep_value=True)
    assert list(frame.columns) == [*COLUMNS, *SCHEMA.names, "value"]
    assert frame["offset"].dtype == "int64" and frame["seq"].dtype == "Int64"
    assert frame["reading_count"].dtype == "Int64" and frame["reading_count"][0] == 2**62
    assert frame["event_ts"].dtype == "datetime64[ns]" and frame["calibrated_at"][0] == pd.Timestamp("2026-11-21 10:00")
    assert frame["temperature"].dtype == "float64" and math.isnan(frame["temperature"][0])
    assert frame["error"].tolist() == [None, None, "value is not valid JSON"]


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message(), min_size=1, max_size=10))
def test_the_fast_path_gives_what_the_exhaustive_reading_gives(messages):
    """Every column of every row (a double by value: the two readings differ in the sign of a zero)."""
    for i, text in enumerate(messages):
        record = KafkaRecord("t", 0, i, dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC), b"s1", text.encode())
        assert parse_record(record, SCHEMA) == parse_record(record, SCHEMA, fast_path=False), text


@pytest.mark.parametrize(("name", "value", "reason"), LONG_STRINGS, ids=[c[0] for c in LONG_STRINGS])
@pytest.mark.parametrize("fast_path", [True, False])
def test_a_string_past_jacksons_longest_is_malformed(name, value, reason, fast_path):
    assert {r["error"] for r in parse_record(_record(value), SCHEMA, fast_path=fast_path)} == {reason}
