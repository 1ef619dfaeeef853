"""Spark's parse of Kafka values: every malformed shape gets its own reason, valid ones none.

Runs ``parse_records`` on a DataFrame with the Kafka source's columns (the parse is a pure Spark
expression over them), so each case is one row and the whole table runs in one job.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import struct

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.record_parse import KafkaRecord, parse_record
from reconstructor.spark.parse import parse_records
from tests.integration.test_fuzz import JSON_ANY, dumps, fleet

pytestmark = pytest.mark.integration
TS = "2026-11-21T10:00:00Z"
RANGE = "is outside the supported range 1677-09-22T00:00:00Z..2262-04-11T00:00:00Z"


_NO_ROWS = object()


class Raw(tuple):
    """A record's (key, value) as raw bytes, for what a string cannot hold (bytes that are not UTF-8)."""


def _records(spark, values: list):
    """A DataFrame with the Kafka source's columns: one record per value, offsets 0, 1, ...

    A value is a string (keyed s1) or a ``Raw`` (key, value)."""
    kafka_ts = dt.datetime(2026, 11, 21, 10, 0, 0)
    return spark.createDataFrame(
        [("parse-t", 0, i, kafka_ts, *(v if isinstance(v, Raw) else (b"s1", v.encode())))
         for i, v in enumerate(values)],
        "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY")


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
    # Shapes the fast path must not vouch for: JSON null merges away in schema_of_variant, so a
    # null op, a null row or a bad value beside good ones must still be found.
    ("null op beside a string op", _msg([{"id": "a", "op": "upsert"}, {"id": "b", "op": None}]),
     "rows[1].op must be upsert or delete"),
    ("null row beside an object", _msg([{"id": "a"}, None]), "rows[1] is not an object"),
    ("null id beside a string id", _msg([{"id": "a"}, {"id": None}]), "rows[1].id must be a non-empty string"),
    ("delete with values after an upsert", _msg([{"id": "a", "values": {}}, {"id": "b", "op": "delete",
                                                  "values": {"status": "x"}}]),
     "rows[1] is a delete and carries values"),
    ("decimal beside an integer for a long", _msg([{"id": "a", "values": {"reading_count": 1}},
                                                   {"id": "b", "values": {"reading_count": 2.5}}]),
     "rows[1].values.reading_count expects long, got DECIMAL"),
    ("bad timestamp in a valid shape", _msg([{"id": "a", "values": {"calibrated_at": 'so "on" é'}}]),
     'rows[0].values.calibrated_at expects timestamp, got STRING "so \\"on\\" é"'),
    ("column named like a field", _msg([{"id": "a", "values": {"id": "x"}}]),
     "rows[0].values has unknown column id"),
    ("valid empty values", _msg([{"id": "a", "values": {}}]), None),
    # Valid-looking but beyond what the pipeline can carry: never a value pandas cannot convert.
    ("ts before the supported range", _msg([], ts="0001-01-01T00:00:00Z"),
     f"ts 0001-01-01T00:00:00Z {RANGE}"),
    ("ts after the supported range", _msg([], ts="9999-12-31T23:59:59Z"), f"ts 9999-12-31T23:59:59Z {RANGE}"),
    ("ts just before the supported range", _msg([], ts="1677-09-21T23:59:59.999999Z"),
     f"ts 1677-09-21T23:59:59.999999Z {RANGE}"),
    ("ts at the end of the supported range", _msg([], ts="2262-04-11T00:00:00Z"), None),
    ("ts at the start of the supported range", _msg([], ts="1677-09-22T00:00:00Z"), None),
    ("row timestamp after the supported range",
     _msg([{"id": "a", "values": {"calibrated_at": "9999-12-31T23:59:59Z"}}]),
     f"rows[0].values.calibrated_at 9999-12-31T23:59:59Z {RANGE}"),
    ("row timestamp before the supported range in a checked message",
     _msg([{"id": "a", "values": {"calibrated_at": "0001-01-01T00:00:00+01:00"}},
           {"id": "b", "op": None}]),
     f"rows[0].values.calibrated_at 0001-01-01T00:00:00+01:00 {RANGE}"),
    ("empty session", _msg([], session=""), "session must be a non-empty string"),
    ("empty session and key", Raw((b"", _msg([], session="").encode())), "session must be a non-empty string"),
    ("key not UTF-8", Raw((b"\xff\xfe", _msg([]).encode())), "Kafka key is not valid UTF-8"),
    ("value not UTF-8 inside a string",
     Raw((b"s1", _msg([{"id": "a", "values": {"status": "X"}}]).encode().replace(b'"X"', b'"\xff"'))),
     "Kafka value is not valid UTF-8"),
    ("value not UTF-8 and not JSON", Raw((b"s1", b"\xc3\x28")), "Kafka value is not valid UTF-8"),
    ("no key and no JSON", Raw((None, b"{not json")), "value is not valid JSON"),
    ("valid null values in every column", _msg([{"id": "a", "values": {
        "temperature": None, "pressure": None, "humidity": None, "status": None, "reading_count": None,
        "calibrated_at": None}}]), None),
]


#: Jackson's longest string (``StreamReadConstraints``' default of Spark 4.2's Jackson, 20,000,000),
#: counted in UTF-16 code units of the string as decoded, wherever it lies in the value.
LONGEST_STRING = 20_000_000
LONG_STRINGS = [
    ("a string of the longest", _msg([{"id": "a", "values": {"status": "x" * LONGEST_STRING}}]), None),
    ("a string one past the longest", _msg([{"id": "a", "values": {"status": "x" * (LONGEST_STRING + 1)}}]),
     "value is not valid JSON"),
    ("a string one past the longest in UTF-16",
     json.dumps(json.loads(_msg([{"id": "a", "values": {"status": "x" * (LONGEST_STRING - 1) + "\U0001F600"}}])),
                ensure_ascii=False), "value is not valid JSON"),
    ("an escape counts as the character it stands for",
     _msg([{"id": "a", "values": {"status": "x" * (LONGEST_STRING - 1) + "\n"}}]), None),
    ("an unknown field's string one past the longest", _msg([], extra="x" * (LONGEST_STRING + 1)),
     "value is not valid JSON"),
]


def test_the_longest_string_is_the_one_sparks_jackson_allows(spark):
    """``try_parse_json`` reads with Jackson's default constraints (``VariantBuilder``: a plain
    ``JsonFactory``), so its longest string is Jackson's default, which the parse without Spark
    holds (``LONG_STRINGS``, its cases, were read by ``parse_records`` on Spark 4.2 with the
    outcomes they name; pushing 20 MB strings through Spark in every run costs a minute)."""
    from reconstructor.core.record_parse import MAX_STRING_LENGTH

    jackson = spark.sparkContext._jvm.com.fasterxml.jackson.core.StreamReadConstraints.defaults()
    assert jackson.getMaxStringLength() == MAX_STRING_LENGTH == LONGEST_STRING


def test_each_malformed_shape_has_its_reason_and_valid_ones_none(spark):
    df = _records(spark, [value for _, value, _ in CASES])
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


def test_extreme_input_reaches_pandas_as_values_it_can_hold(spark):
    """Both paths agree on every extreme case, and what they hand on converts to pandas: times in
    the range pandas carries or null, keys and strings valid UTF-8, a session group never empty."""
    df = _records(spark, [value for _, value, _ in CASES])
    schema = RowSchema.load()
    fast, checked = (parse_records(df, schema, fast_path=f).orderBy("offset", "row_pos") for f in (True, False))
    assert fast.collect() == checked.collect()
    frame = fast.toPandas()  # Arrow, as the stateful step converts: an out-of-range time raises here
    assert (frame["group_session"] != "").all()
    by_offset = {name: i for i, (name, _, _) in enumerate(CASES)}
    bad_key = frame[frame["offset"] == by_offset["key not UTF-8"]]
    assert list(bad_key["key"]) == ["\ufffd\ufffd"]
    no_session = frame[frame["offset"].isin([by_offset["no key and no JSON"], by_offset["empty session and key"]])]
    assert no_session["group_session"].isna().all()
    for name in ("ts before the supported range", "ts after the supported range"):
        assert frame[frame["offset"] == by_offset[name]]["event_ts"].isna().all()


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
    df = _records(spark, [value])
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


# Messages for the fast-path property: mostly valid, each part sometimes missing, null, of the wrong
# JSON type or unknown, so that both paths see every check fail alone and together.
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                     st.sampled_from(["2026-11-21T10:00:00Z", "2026-11-21T11:30:00.5+01:00", "soon", ""]))
_ANY = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2), st.dictionaries(st.text(max_size=3), _SCALARS, max_size=2))
_ABSENT = object()


def _maybe(valid, rare=_ANY):
    return st.one_of(valid, valid, valid, valid, rare, st.just(_ABSENT))


_VALUE = {
    "double": st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False)),
    "long": st.integers(-2**63, 2**63 - 1),
    "string": st.text(max_size=12),
    "boolean": st.booleans(),
    "timestamp": st.sampled_from(["2026-11-21T10:00:00Z", "2025-01-01T00:00:00.123456+05:30",
                                  "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]),
}


@st.composite
def _message(draw):
    schema = RowSchema.load()
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from(["{not json", "[1, 2]", '"text"', "", '{"session": "s1", "session": "s2"}',
                                     '{"session": "s1", "seq": 1, "type": "end", "ts": "2026-11-21T10:00:00Z"} x']))

    def obj(fields):
        return {k: v for k, v in fields.items() if v is not _ABSENT}

    def values():
        cols = {c.name: draw(_maybe(_VALUE[c.type], _SCALARS)) for c in schema.columns}
        if draw(st.integers(0, 10)) == 0:
            cols[draw(st.sampled_from(["colour", "id", "Temperature", "a b"]))] = 1
        return obj(cols)

    def row():
        if draw(st.integers(0, 20)) == 0:
            return draw(_SCALARS)
        fields = {"id": draw(_maybe(st.sampled_from(["a", "b", "c"]), st.sampled_from(["", None, 5]))),
                  "op": draw(st.one_of(st.just(_ABSENT), st.just(_ABSENT), st.sampled_from(["upsert", "delete"]),
                                       st.sampled_from([None, "merge", 1]))),
                  "values": values() if draw(st.integers(0, 8)) else draw(st.sampled_from([None, [1], "x", _ABSENT]))}
        if draw(st.integers(0, 15)) == 0:
            fields["colour"] = 1
        return obj(fields)

    env = obj({"session": draw(_maybe(st.just("s1"), st.sampled_from([5, None, ""]))),
               "seq": draw(_maybe(st.integers(0, 2**40), st.sampled_from([-1, 1.5, "7", None]))),
               "type": draw(_maybe(st.sampled_from(["snapshot", "update", "end"]), st.sampled_from(["upsert", 3]))),
               "ts": draw(_maybe(st.just("2026-11-21T10:00:00Z"),
                                 st.sampled_from(["yesterday", 5, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]))),
               "rows": draw(_maybe(st.lists(st.builds(row), max_size=4), st.sampled_from([None, {"id": "a"}, 5])))})
    if draw(st.integers(0, 15)) == 0:
        env["extra"] = 1
    return json.dumps(env)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=st.lists(_message(), min_size=1, max_size=60))
def test_fast_path_never_changes_a_result(spark, messages):
    """Every output column of every record is what the exhaustive checks alone give."""
    df = _records(spark, messages)
    schema = RowSchema.load()

    def rows(fast_path: bool):
        parsed = parse_records(df, schema, fast_path=fast_path)
        # Timestamps as microseconds: a malformed record's junk may be a year Python cannot hold.
        out = parsed.select([F.unix_micros(c).alias(c) if t == "timestamp" else F.col(c)
                             for c, t in parsed.dtypes]).collect()
        return sorted((tuple(r) for r in out), key=lambda t: (t[3], -1 if t[10] is None else t[10]))

    fast, checked = rows(True), rows(False)
    assert len(fast) == len(checked)
    for f, c in zip(fast, checked):
        assert f == c, (messages[f[3]], f, c)


# The parse without Spark against Spark's: records of the fuzz suite's hostile fleets and the
# messages above, one DataFrame per example.  ``RECON_PARSE_EXAMPLES`` runs more, ``RECON_PARSE_SEED``
# other ones.
KAFKA_DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"
EPOCH = dt.datetime(1970, 1, 1)


@st.composite
def _odd_value(draw) -> str:
    """A message whose one column holds any JSON (doubles of every size, nested arrays and objects):
    how Spark names and prints a wrong value."""
    column = draw(st.sampled_from(RowSchema.load().names))
    value = dumps(draw(st.one_of(st.floats(allow_nan=False), JSON_ANY)))
    return '{"session":"s1","seq":1,"type":"update","ts":"%s","rows":[{"id":"a","values":{"%s":%s}}]}' % (
        TS, column, value)


@st.composite
def _kafka_records(draw) -> list[KafkaRecord]:
    hostile = draw(fleet())
    kafka_ts = dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC)
    messages = draw(st.lists(st.one_of(_message(), _odd_value()), max_size=20))
    return ([KafkaRecord("parse-t", r.partition, r.offset, r.kafka_ts, r.key, r.value) for r in hostile]
            + [KafkaRecord("parse-t", 0, 10_000 + i, kafka_ts, b"s1", m.encode()) for i, m in enumerate(messages)])


def _comparable(value):
    """Exactly the value: a time as epoch microseconds, a double by its bits."""
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, float):
        return struct.pack("<d", value)
    return value


def _comparable_row(values: tuple, malformed: bool) -> tuple:
    """A row's values exactly, except that the doubles of a malformed record (one of its rows has
    an error) are compared by value: its values are never applied, and Spark's two readings of
    ``-0.0`` differ in the sign of the zero (the fast path's JSON reader keeps it; the exhaustive
    one reads a decimal, which has none)."""
    return tuple(v if malformed and isinstance(v, float) else _comparable(v) for v in values)


@settings(max_examples=int(os.environ.get("RECON_PARSE_EXAMPLES") or 12), deadline=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@seed(int(os.environ.get("RECON_PARSE_SEED") or 20261128))
@given(records=_kafka_records())
def test_the_parse_without_spark_is_sparks(spark, records):
    """Every row ``parse_record`` gives is the row Spark's parse gives, with the fast path (what a
    run reads) and without it (every check on every record): every column, the error text
    character for character."""
    schema = RowSchema.load()
    df = spark.createDataFrame([(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value) for r in records],
                               KAFKA_DDL)
    by_offset = {r.offset: r for r in records}
    for fast_path in (True, False):
        parsed = parse_records(df, schema, fast_path=fast_path, keep_values=True)
        out = parsed.select([F.unix_micros(c).alias(c) if t == "timestamp" else F.col(c) for c, t in parsed.dtypes])
        collected = out.collect()
        malformed = {r.offset for r in collected if r.error is not None}
        spark_rows = {(r.offset, r.row_pos): _comparable_row(tuple(r), r.offset in malformed) for r in collected}
        ours = {(row["offset"], row["row_pos"]): _comparable_row(tuple(row.values()), row["offset"] in malformed)
                for r in records for row in parse_record(r, schema, keep_value=True, fast_path=fast_path)}
        assert sorted(ours, key=str) == sorted(spark_rows, key=str), fast_path
        for where, row in spark_rows.items():
            assert ours[where] == row, (fast_path, by_offset[where[0]],
                                        [(c, a, b) for c, a, b in zip(out.columns, ours[where], row) if a != b])
