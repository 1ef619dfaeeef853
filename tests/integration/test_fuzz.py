"""Fuzzing the real parse and stateful step with hostile Kafka records, against the reference model.

Hypothesis generates fleets of sessions (a snapshot, updates, resync snapshots, an end; seqs from 0
up to the largest long) on two partitions, then breaks them: a lost, repeated, swapped or moved
record, and inside records arbitrary bytes, JSON of every shape, numbers at and past every type's
limits, NaN and Infinity literals, repeated keys, deep nesting, huge strings, ids from every
Unicode plane (and lone surrogates), trailing content, keys and Kafka timestamps out of line.

The records go through ``parse_records`` and the real ``applyInPandasWithState`` step in one
SparkSession (a streaming query over a file source with the Kafka source's columns, one micro-batch,
quarantine mode so that every record gets a verdict).  An independent oracle decides each raw
record by the contract (strict JSON: no repeated key, no NaN, nothing after the value; the schema's
types and ranges) and replays the well-formed ones through the dict-replay reference model
(``tests.support.model``).  Every record must get the model's verdict with its coordinates, every
applied change its exact values (longs exact, doubles bit for bit, strings in every plane), every
refused record its raw value, and no worker may crash.

The seed is printed (and can be set with ``RECON_FUZZ_SEED``); a failure also prints Hypothesis's
falsifying example and its reproduction blob.  ``make test`` runs a fixed seed, so that CI passes or
fails on the code alone; ``make fuzz`` draws a new seed and more examples, to look for the next odd
input (``RECON_FUZZ_SEED=random``, ``RECON_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import struct
import sys
import tempfile
import uuid
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.policy import IntegrityPolicy, OnViolation
from reconstructor.core.step_spec import StepSpec
from reconstructor.core.timestamps import parse_rfc3339
from reconstructor.spark.parse import parse_records
from reconstructor.spark.stateful import reconstruct
from tests.support.model import Msg, QuarantineModel

pytestmark = pytest.mark.integration

SCHEMA = RowSchema.load()
TOPIC = "fuzz-sensor"
KAFKA_DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"
QUARANTINE = IntegrityPolicy(OnViolation.QUARANTINE)
_SEED = os.environ.get("RECON_FUZZ_SEED") or "20261125"
SEED = random.SystemRandom().randrange(2**32) if _SEED == "random" else int(_SEED)
EXAMPLES = int(os.environ.get("RECON_FUZZ_EXAMPLES") or 8)
UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
# The times the tables carry (both ends included), and Jackson's limits, which Spark's JSON
# parser keeps: nesting depth (1000, less the level the parse's check for trailing content wraps
# the value in), digits of a number.
TS_MIN, TS_MAX = dt.datetime(1677, 9, 22, tzinfo=UTC), dt.datetime(2262, 4, 11, tzinfo=UTC)
MAX_DEPTH, MAX_NUMBER_CHARS = 999, 1000
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1
KAFKA_TS = dt.datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)


# ------------------------------------------------------------------------------------------------
# JSON text with what ``json.dumps`` cannot write: repeated keys and raw tokens.


class Raw(str):
    """A JSON token written as it is (``NaN``, ``1e309``, a deep nest, ...)."""


class Obj(list):
    """A JSON object as its (key, value) pairs in order: a key may repeat."""


def dumps(v, ascii_only: bool = False) -> str:
    if isinstance(v, Raw):
        return str(v)
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return json.dumps(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=ascii_only)
    if isinstance(v, Obj):
        return "{" + ",".join(f"{dumps(k, ascii_only)}:{dumps(x, ascii_only)}" for k, x in v) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dumps(x, ascii_only) for x in v) + "]"
    raise TypeError(type(v))


def _get(obj: Obj, key):
    return next((v for k, v in obj if k == key), None)


def _set(obj: Obj, key, value) -> None:
    for i, (k, _) in enumerate(obj):
        if k == key:
            obj[i] = (k, value)
            return
    obj.append((key, value))


def _drop(obj: Obj, key) -> None:
    obj[:] = [(k, v) for k, v in obj if k != key]


# ------------------------------------------------------------------------------------------------
# The oracle: the contract's verdict on one raw record.


class Refused(Exception):
    """The record is malformed."""


@dataclass
class Record:
    """One Kafka record as produced, and what the oracle makes of it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    kafka_ts: dt.datetime = KAFKA_TS
    #: How the generator builds the value: a JSON tree (or bytes), a prefix, a suffix, ASCII escapes.
    plan: dict | None = None
    # The oracle's reading (``judge``):
    group: str | None = None
    msg: Msg | None = None
    text: str | None = None  # the value as UTF-8, when it is


def _strict_json(text: str):
    """``text`` as JSON, as strictly as RFC 8259 and Spark's parser read it: no repeated key, no
    NaN or Infinity, nothing after the value, no lone surrogate, no deeper nesting or longer number
    than the parser takes.  Raises ``Refused``."""
    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise Refused("a key repeats")
        return dict(items)

    def constant(name):
        raise Refused(f"{name} is not JSON")

    def number(kind):
        def read(s):
            if len(s) > MAX_NUMBER_CHARS:
                raise Refused("number too long")
            return kind(s)
        return read

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))
    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant,
                           parse_float=number(float), parse_int=number(int))
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise Refused(f"not JSON: {e}") from None
    finally:
        sys.setrecursionlimit(limit)
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)) and depth > MAX_DEPTH:
            raise Refused("nested too deep")
        if isinstance(v, dict):
            for k, x in v.items():
                _unicode(k)
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str):
            _unicode(v)
    return value


def _unicode(s: str) -> None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
        raise Refused("a lone surrogate is no character")


def _is_int(v) -> bool:
    return type(v) is int


def _time(v, what: str) -> dt.datetime:
    if not isinstance(v, str):
        raise Refused(f"{what} must be a string")
    try:
        t = parse_rfc3339(v)
    except ValueError:
        raise Refused(f"{what} is not RFC 3339") from None
    if not TS_MIN <= t <= TS_MAX:
        raise Refused(f"{what} outside the range")
    return t.replace(tzinfo=None)


def _column(kind: str, v, name: str):
    if v is None:
        return None
    if kind == "double":
        if type(v) not in (int, float):
            raise Refused(f"{name} expects double")
        try:
            f = float(v)
        except OverflowError:
            raise Refused(f"{name} past the largest double") from None
        if math.isinf(f) or math.isnan(f):
            raise Refused(f"{name} past the largest double")
        return f
    if kind == "long":
        if not _is_int(v) or not LONG_MIN <= v <= LONG_MAX:
            raise Refused(f"{name} expects long")
        return v
    if kind == "string":
        if not isinstance(v, str):
            raise Refused(f"{name} expects string")
        return v
    if kind == "boolean":
        if type(v) is not bool:
            raise Refused(f"{name} expects boolean")
        return v
    if kind == "timestamp":
        return _time(v, name)
    raise AssertionError(kind)


def _rows(m: dict) -> list[dict]:
    rows = m.get("rows")
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise Refused("rows must be an array")
    if m["type"] == "end" and rows:
        raise Refused("an end carries no rows")
    out = []
    types = {c.name: c.type for c in SCHEMA.columns}
    for r in rows:
        if not isinstance(r, dict) or set(r) - {"id", "op", "values"}:
            raise Refused("a row is not an object of id, op, values")
        if not isinstance(r.get("id"), str) or r["id"] == "":
            raise Refused("id must be a non-empty string")
        op = r.get("op", "upsert")
        if op not in ("upsert", "delete"):
            raise Refused("op must be upsert or delete")
        values = r.get("values")
        if op == "delete" and values is not None:
            raise Refused("a delete carries no values")
        if values is not None and not isinstance(values, dict):
            raise Refused("values must be an object")
        values = values or {}
        if set(values) - set(types):
            raise Refused("unknown column")
        out.append({"id": r["id"], "op": op,
                    "values": {c: _column(types[c], v, c) for c, v in values.items()}})
    return out


def judge(rec: Record) -> Record:
    """The record with the oracle's reading: the group the contract files it under (its session,
    else its key, else none), and the message as the model takes it (``error`` when malformed)."""
    key = None if rec.key is None else rec.key.decode("utf-8", "replace")
    errors = []
    if rec.key is not None and _utf8(rec.key) is None:
        errors.append("key not UTF-8")
    if not TS_MIN <= rec.kafka_ts <= TS_MAX:
        errors.append("Kafka timestamp outside the range")
    text, m = _utf8(rec.value), None
    if text is None:
        errors.append("value not UTF-8")
    else:
        try:
            m = _strict_json(text)
        except Refused as e:
            errors.append(str(e))
    session = m.get("session") if isinstance(m, dict) else None
    # The group is what Spark reads as the session (any other JSON value cast to its text: 5,
    # true, [] and {} as they are written), else the key.
    named = (session if isinstance(session, str) else
             ("true" if session else "false") if type(session) is bool else
             str(session) if _is_int(session) else
             json.dumps(session, separators=(",", ":")) if session in ([], {}) else None)
    group = named or key or None
    seq = m.get("seq") if isinstance(m, dict) else None
    seq = seq if _is_int(seq) and LONG_MIN <= seq <= LONG_MAX else None
    parsed = {"type": None, "rows": []}
    if isinstance(m, dict) and not errors:
        try:
            parsed = _message(m)
        except Refused as e:
            errors.append(str(e))
    if not errors and key != session:
        errors.append("key is not the session")
    msg = Msg(seq=seq, type=parsed["type"], rows=parsed["rows"] if not errors else [],
              partition=rec.partition, offset=rec.offset, session=group,
              error="; ".join(errors) if errors else None)
    return replace(rec, group=group, msg=msg, text=text)


def _utf8(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _message(m) -> dict:
    if not isinstance(m, dict):
        raise Refused("not an object")
    if set(m) - {"session", "seq", "type", "ts", "rows"}:
        raise Refused("unknown field")
    if not isinstance(m.get("session"), str) or m["session"] == "":
        raise Refused("session must be a non-empty string")
    if not _is_int(m.get("seq")) or not 0 <= m["seq"] <= LONG_MAX:
        raise Refused("seq must be a long, not negative")
    if m.get("type") not in ("snapshot", "update", "end") or not isinstance(m["type"], str):
        raise Refused("type")
    _time(m.get("ts"), "ts")
    return {"type": m["type"], "rows": _rows(m)}


def expected(records: list[Record]) -> dict:
    """Per group: (recorded [(kind, offset)], applied changes, status, last seq), by the model."""
    groups: dict = {}
    for r in records:
        groups.setdefault(r.group, []).append(r.msg)
    out = {}
    for group, msgs in groups.items():
        if group is None:  # no session and no key: each is malformed, nothing to quarantine
            out[None] = ([("MALFORMED", m.offset) for m in sorted(msgs, key=lambda m: m.offset)], [], None, None)
            continue
        model = QuarantineModel()
        home = min((m.seq is None, m.seq or 0, m.partition) for m in msgs)[2]
        for m in sorted(msgs, key=lambda m: (m.partition != home, m.partition, m.offset)):
            model.apply(m)
        out[group] = (model.recorded, model.strict.changes, model.status, model.strict.last_seq)
    return out


# ------------------------------------------------------------------------------------------------
# Generators.

# Every plane, U+0000 and the last code point included; surrogates only where they are meant.
CHARS = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=("Cs",))
ODD = ["\x00", "\U0010FFFF", "\U0001F600", "\uFFFF", "\u2028", "\x7f", "\ufeff", "\U000E0001", "é", "\U00020000",
       "a\"b\\c", "\n\t\r"]
IDS = st.one_of(st.sampled_from(["a", "b", "c"]), st.sampled_from(ODD), st.text(CHARS, min_size=1, max_size=6))
DOUBLES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False), st.integers(-2**70, 2**70),
    st.sampled_from([-0.0, 0.0, 5e-324, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308,
                     2.2250738585072014e-308, 2**53 + 1, 0.1, 0.30000000000000004, 10**308]),
    st.sampled_from([Raw("1e-400"), Raw("0.1e1"), Raw("-0"), Raw("1E+2"), Raw("-0.0e0"),
                     Raw("179769313486231570" + "0" * 291)]))
LONGS = st.one_of(st.integers(LONG_MIN, LONG_MAX), st.sampled_from([LONG_MAX, LONG_MIN, 2**53 + 1, -(2**53 + 1), 0,
                                                                    Raw("-0")]))
STRINGS = st.one_of(st.text(CHARS, max_size=12), st.sampled_from(ODD), st.just(""))


@st.composite
def rfc3339(draw, edges: int = 25) -> str:
    """A time in one of RFC 3339's forms inside the range the tables carry; one in ``edges`` an edge
    case: a limit of the range, just past it, a form that is no RFC 3339 time."""
    if draw(st.integers(1, edges)) == 1:
        return draw(st.sampled_from([
            "1677-09-22T00:00:00Z", "2262-04-11T00:00:00Z", "2262-04-11T00:00:00.000001Z",
            "1677-09-21T23:59:59.999999999Z", "2262-04-10T23:59:60Z", "2262-04-11T01:00:00+01:00",
            "1677-09-22T00:00:00+00:01", "2026-11-21T10:00:00.123456789Z", "2024-02-29T00:00:00Z",
            "2026-02-29T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21 10:00:00Z", "2026-11-21t10:00:00z",
            "2026-11-21T10:00:00", "2026-11-21T10:00:00+24:00", "2026-11-21T10:00:00-00:00",
            "\uff12026-11-21T10:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-11-21T10:00:00Z\n",
            "", "soon"]))
    t = draw(st.datetimes(dt.datetime(1677, 9, 22), dt.datetime(2262, 4, 10)))
    minutes = draw(st.sampled_from([0, 0, 60, -330, 23 * 60 + 59, -(23 * 60 + 59)]))
    local = t + dt.timedelta(minutes=minutes)
    offset = ("Z" if draw(st.booleans()) else "z") if minutes == 0 and draw(st.booleans()) else (
        f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}")
    digits = draw(st.integers(0, 9))
    fraction = (f"{local.microsecond:06d}" + "".join(draw(st.sampled_from("0123456789")) for _ in range(3)))[:digits]
    sep = draw(st.sampled_from("TTTt "))
    return f"{local:%Y-%m-%d}{sep}{local:%H:%M:%S}{'.' + fraction if digits else ''}{offset}"


def _value(kind: str):
    return {"double": DOUBLES, "long": LONGS, "string": STRINGS, "timestamp": rfc3339(),
            "boolean": st.booleans()}[kind]


@st.composite
def values(draw) -> Obj:
    out = Obj()
    for c in SCHEMA.columns:
        how = draw(st.integers(0, 3))
        if how == 0:
            continue
        out.append((c.name, None if how == 1 else draw(_value(c.type))))
    return Obj(draw(st.permutations(out)))


@st.composite
def session(draw, sid: str, partition: int) -> list[Record]:
    """A valid session: a snapshot, updates (deletes of rows it has), resync snapshots, maybe an end."""
    ids = draw(st.lists(IDS, min_size=1, max_size=4, unique=True))
    n = draw(st.integers(2, 10))
    first = draw(st.sampled_from([0, 0, 0, 41, 2**62, LONG_MAX - n + 1]))
    present: set = set()
    out = []
    for k in range(n):
        if k == 0 or draw(st.integers(0, 6)) == 0:
            kind = "snapshot"
            chosen = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
            rows = [Obj([("id", rid), ("values", draw(values()))]) for rid in chosen]
            present = set(chosen)
        elif k == n - 1 and draw(st.integers(0, 2)) == 0:
            kind, rows = "end", []
        else:
            kind, rows = "update", []
            for _ in range(draw(st.integers(0, 3))):
                rid = draw(st.sampled_from(ids))
                if rid in present and draw(st.integers(0, 2)) == 0:
                    rows.append(Obj([("id", rid), ("op", "delete")]))
                    present.discard(rid)
                else:
                    row = Obj([("id", rid), ("values", draw(values()))])
                    if draw(st.booleans()):
                        row.insert(1, ("op", "upsert"))
                    rows.append(row)
                    present.add(rid)
        env = Obj([("session", sid), ("seq", first + k), ("type", kind), ("ts", draw(rfc3339()))])
        if rows or draw(st.booleans()):
            env.append(("rows", rows))
        env = Obj(draw(st.permutations(env)))
        out.append(_planned(partition, sid, env))
    return out


def _planned(partition: int, sid: str, env) -> Record:
    return Record(partition, 0, sid.encode("utf-8"), b"",
                  plan={"value": env, "prefix": "", "suffix": "", "ascii": False})


def _deep(depth: int, kind: str) -> Raw:
    return Raw("[" * depth + "]" * depth if kind == "array" else '{"a":' * depth + "1" + "}" * depth)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(CHARS, max_size=6))
JSON_ANY = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(st.tuples(st.text(CHARS, max_size=4), inner), max_size=3).map(Obj)),
    max_leaves=8)
WRONG = st.sampled_from([None, 5, -1, 1.5, "x", "", True, [], Obj(), [1], Obj([("a", 1)])])


def _some_row(draw, env: Obj):
    rows = _get(env, "rows")
    rows = [r for r in rows if isinstance(r, Obj)] if isinstance(rows, list) else []
    return draw(st.sampled_from(rows)) if rows else None


@st.composite
def mutate(draw, rec: Record, others: list[str]) -> str:
    """Break ``rec``'s plan in one way; returns what was done (for the falsifying example)."""
    plan = rec.plan
    env = plan["value"]
    row = _some_row(draw, env)
    vals = _get(row, "values") if row is not None else None
    vals = vals if isinstance(vals, Obj) else None
    kinds = ["ascii", "number", "literal", "dup", "trailing", "leading", "deep", "huge", "surrogate", "field",
             "key", "session", "kafka_ts", "seq", "type", "ts", "end_rows", "json", "bytes"]
    if row is not None:
        kinds += ["row", "row", "row_dup"]
    if vals is not None:
        kinds += ["literal", "number", "number", "values_dup", "deep_value", "huge"]
    kind = draw(st.sampled_from(kinds))
    if kind == "bytes":
        plan["value"] = draw(st.binary(min_size=1, max_size=40))
    elif kind == "json":
        plan["value"] = draw(JSON_ANY)
    elif kind == "trailing":
        plan["suffix"] = draw(st.sampled_from([" x", "]", "}", ",", "\x00", " {}", "\n", " \t\r\n", "\x0b",
                                               "\u00a0", "//", "  ", "]}", "}]", ",0]", ' "a"', "\ufeff"]))
    elif kind == "leading":
        plan["prefix"] = draw(st.sampled_from(["\ufeff", " \n\t\r", "\x00", "\x0c", "[", ","]))
    elif kind == "ascii":
        plan["ascii"] = True
    elif kind == "literal":
        target = vals if vals is not None else env
        name = draw(st.sampled_from(["temperature", "pressure", "humidity"])) if vals is not None else "seq"
        _set(target, name, Raw(draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "inf", "+1", ".5",
                                                      "01", "1.", "0x10", "1e", "-"]))))
    elif kind == "number":
        if vals is not None and draw(st.booleans()):
            _set(vals, "reading_count", draw(st.sampled_from(
                [2**63, LONG_MIN - 1, 10**30, 1.5, 1.0, Raw("1e2"), Raw("1E0"), -0.0, LONG_MAX, LONG_MIN])))
        elif vals is not None:
            _set(vals, draw(st.sampled_from(["temperature", "pressure", "humidity"])), draw(st.sampled_from(
                [Raw("1e309"), Raw("-1e309"), Raw("1E400"), 10**400, -10**400, Raw("1" + "0" * 999),
                 Raw("1" + "0" * 1001), Raw("0." + "0" * 1000 + "1"), Raw("1e-400"), Raw("-0.0"),
                 Raw("2.4703282292062328e-324"), Raw("1.7976931348623158e308"), Raw("1.7976931348623159e308")])))
        else:
            _set(env, "seq", draw(st.sampled_from([2**63, LONG_MAX, LONG_MIN, -1, 10**30, Raw("1e0"), 1.0])))
    elif kind == "dup":
        name = draw(st.sampled_from(["session", "seq", "type", "ts", "rows"]))
        same = _get(env, name)
        env.insert(draw(st.integers(0, len(env))), (name, same if draw(st.booleans()) else draw(WRONG)))
    elif kind == "row_dup":
        name = draw(st.sampled_from(["id", "op", "values"]))
        row.append((name, _get(row, name) if draw(st.booleans()) else "upsert"))
    elif kind == "values_dup":
        name = draw(st.sampled_from(SCHEMA.names))
        vals.append((name, _get(vals, name)))
        vals.append((name, None))
    elif kind == "deep":
        plan["value"] = draw(st.sampled_from([_deep(d, "array") for d in (100, 999, 1000, 1001, 1500)]
                                             + [_deep(d, "object") for d in (100, 300, 900, 998, 1001, 1500)]))
    elif kind == "deep_value":
        # The value's own depth comes on top of the message's four (envelope, rows, row, values).
        _set(vals, draw(st.sampled_from(SCHEMA.names)), draw(st.sampled_from(
            [_deep(d, "array") for d in (100, 995, 996, 997, 1200)]
            + [_deep(d, "object") for d in (100, 300, 900, 994, 997, 1200)])))
    elif kind == "huge":
        text = draw(st.sampled_from(ODD + ["x", "é"])) * draw(st.sampled_from([10_000, 50_000, 100_000]))
        if vals is not None and draw(st.booleans()):
            _set(vals, "status", text)
        elif row is not None:
            _set(row, "id", text)
        else:
            _set(env, "type", text)
    elif kind == "surrogate":
        lone = draw(st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d"]))
        plan["ascii"] = draw(st.booleans())  # escaped in JSON, or raw (bytes that are not UTF-8)
        if row is not None and draw(st.booleans()):
            _set(row, "id", lone)
        elif vals is not None and draw(st.booleans()):
            _set(vals, "status", lone)
        else:
            _set(env, "session", lone)
    elif kind == "field":
        what = draw(st.sampled_from(["unknown", "missing", "wrong"]))
        name = draw(st.sampled_from(["session", "seq", "type", "ts", "rows"]))
        if what == "unknown":
            env.append((draw(st.sampled_from(["extra", "Seq", "rows ", "\x00"])), 1))
        elif what == "missing":
            _drop(env, name)
        else:
            _set(env, name, draw(WRONG))
    elif kind == "key":
        rec.key = draw(st.sampled_from([None, b"", b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80",
                                        *[o.encode() for o in others[:2]]]))
    elif kind == "session":
        _set(env, "session", draw(st.sampled_from([5, True, None, [], Obj(), "", 2**70])))
    elif kind == "kafka_ts":
        rec.kafka_ts = draw(st.sampled_from([dt.datetime(2300, 1, 1, tzinfo=UTC), dt.datetime(1600, 1, 1, tzinfo=UTC),
                                             dt.datetime(1677, 9, 22, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC)]))
    elif kind == "seq":
        _set(env, "seq", draw(st.sampled_from([-1, 2**63, "7", None, True, 1.5, LONG_MAX])))
    elif kind == "type":
        _set(env, "type", draw(st.sampled_from(["upsert", "Snapshot", 3, None, "end", "snapshot"])))
    elif kind == "ts":
        _set(env, "ts", draw(rfc3339(edges=1)))
    elif kind == "end_rows":
        _set(env, "type", "end")
        if not _get(env, "rows"):
            _set(env, "rows", [Obj([("id", "a"), ("op", "delete")])])
    elif kind == "row":
        what = draw(st.sampled_from(["not_object", "unknown", "id", "op", "delete_values", "values", "column"]))
        rows = _get(env, "rows")
        if what == "not_object":
            rows[rows.index(row)] = draw(st.sampled_from([None, 5, "a", [], [Obj([("id", "a")])]]))
        elif what == "unknown":
            row.append(("colour", 1))
        elif what == "id":
            _set(row, "id", draw(st.sampled_from(["", None, 5, [], Obj()])))
        elif what == "op":
            _set(row, "op", draw(st.sampled_from([None, "merge", "Delete", 1, "upsert", "delete"])))
        elif what == "delete_values":
            _set(row, "op", "delete")
            _set(row, "values", draw(st.sampled_from([Obj(), Obj([("status", "x")]), None])))
        elif what == "values":
            _set(row, "values", draw(st.sampled_from([[1], "x", 5, None, Obj()])))
        else:
            _set(row, "values", Obj([*(vals or []), (draw(st.sampled_from(["colour", "id", "Temperature", "a b", ""])), 1)]))
    return kind


@st.composite
def fleet(draw, hostile: bool = True) -> list[Record]:
    """Sessions on two partitions, interleaved, with integrity faults and (``hostile``) broken records."""
    n = draw(st.integers(3, 7))
    sids = draw(st.lists(IDS, min_size=n, max_size=n, unique=True))
    queues = [draw(session(sid, i % 2)) for i, sid in enumerate(sids)]
    # Integrity faults inside a session: a record lost, repeated, swapped with the next, moved to
    # the other partition.
    for q in queues:
        for _ in range(draw(st.integers(0, 2))):
            if len(q) < 2:
                break
            at = draw(st.integers(0, len(q) - 2))
            fault = draw(st.sampled_from(["lose", "repeat", "swap", "move"]))
            if fault == "lose":
                del q[at]
            elif fault == "repeat":
                q.insert(at + 1, replace(q[at], plan={**q[at].plan, "value": _copy(q[at].plan["value"])}))
            elif fault == "swap":
                q[at], q[at + 1] = q[at + 1], q[at]
            else:
                q[at + 1].partition = 1 - q[at + 1].partition
    records = []
    while any(queues):
        q = draw(st.sampled_from([q for q in queues if q]))
        records.append(q.pop(0))
    done = []
    for i, rec in enumerate(records):
        if hostile and draw(st.integers(0, 3)) == 0:
            done.append(draw(mutate(rec, sids)))
        rec.offset = 100 + i  # increasing on each partition, and unique across both
        plan = rec.plan
        v = plan["value"]
        rec.value = v if isinstance(v, bytes) else (plan["prefix"] + dumps(v, plan["ascii"]) + plan["suffix"]).encode(
            "utf-8", "surrogatepass")
    note(f"mutations: {done}")
    return records


def _copy(v):
    if isinstance(v, Obj):
        return Obj((k, _copy(x)) for k, x in v)
    if isinstance(v, list) and not isinstance(v, Raw):
        return [_copy(x) for x in v]
    return v


# ------------------------------------------------------------------------------------------------
# The real parse and stateful step.


def run_step(spark, records: list[Record]) -> list:
    """The records through ``parse_records`` and ``reconstruct`` in quarantine mode: one streaming
    micro-batch over a file source with the Kafka source's columns; the output rows, times as epoch
    microseconds."""
    root = tempfile.mkdtemp(prefix="recon-fuzz-")
    rows = [(TOPIC, r.partition, r.offset, r.kafka_ts, r.key, r.value) for r in records]
    spark.createDataFrame(rows, KAFKA_DDL).coalesce(1).write.parquet(f"{root}/in")
    source = spark.readStream.schema(KAFKA_DDL).parquet(f"{root}/in")
    out = reconstruct(parse_records(source, SCHEMA, keep_values=True),
                      StepSpec(SCHEMA, session_timeout_ms=3_600_000, state_retention_ms=7 * 86_400_000,
                               policy=QUARANTINE))
    out = out.select([F.unix_micros(c).alias(c) if t == "timestamp" else F.col(c) for c, t in out.dtypes])
    got: list = []
    # As ``pipeline._start``: no no-data batches (timeouts), so that available-now ends.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        query = (out.writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
                 .option("checkpointLocation", f"{root}/chk").queryName(f"fuzz_{uuid.uuid4().hex[:8]}")
                 .trigger(availableNow=True).start())
    finally:
        spark.conf.set(key, previous)
    query.awaitTermination()
    return got


def _micros(t: dt.datetime | None) -> int | None:
    return None if t is None else (t.replace(tzinfo=UTC) - EPOCH) // dt.timedelta(microseconds=1)


def _same(kind: str, a, b) -> bool:
    """Exactly the same value: doubles bit for bit, longs as ints, strings code point for code point."""
    if a is None or b is None:
        return a is None and b is None
    if kind == "double":
        return struct.pack("<d", a) == struct.pack("<d", b)
    if kind == "timestamp":
        return a == _micros(b)
    return type(a) is type(b) and a == b


def check(records: list[Record], rows: list) -> None:
    """The product's output is the oracle's: each record's verdict and coordinates, each applied
    change's exact values, each session's status and last seq."""
    by_offset = {r.offset: r for r in records}
    want = expected(records)
    got_recorded: dict = {}
    got_changes: dict = {}
    got_sessions: dict = {}
    for row in rows:
        assert row.record != "violation", f"quarantine mode stopped on {row.info}"
        if row.record == "recorded":
            info = json.loads(row.info)
            got_recorded.setdefault(row.session, []).append(info)
        elif row.record == "change":
            got_changes.setdefault(row.session, []).append(row)
        elif row.record == "session":
            assert row.session not in got_sessions, f"two session rows for {row.session!r}"
            got_sessions[row.session] = (json.loads(row.info), row)
        else:
            raise AssertionError(f"unexpected record {row.record}")
    assert set(got_recorded) | set(got_changes) | set(got_sessions) <= set(want), (
        "sessions the oracle does not know", set(got_recorded) | set(got_sessions) - set(want))
    for group, (recorded, changes, status, last_seq) in want.items():
        where = f"session {group!r}"
        infos = got_recorded.get(group, [])
        assert [(i["kind"], i["offset"]) for i in infos] == recorded, (where, [
            (i["kind"], i["offset"], i["detail"][:200]) for i in infos], recorded,
            {o: (by_offset[o].msg.error, by_offset[o].value[:300]) for _, o in recorded})
        for info in infos:
            rec = by_offset[info["offset"]]
            assert (info["topic"], info["partition"], info["session"]) == (TOPIC, rec.partition, group), (where, info)
            assert info["found_seq"] == rec.msg.seq, (where, info["offset"], info["found_seq"], rec.msg.seq)
            if info["kind"] != "SNAPSHOT_DRIFT" and rec.text is not None:
                assert info["value"] == rec.text, (where, info["offset"], "the raw value was altered")
        if group is None:
            continue
        product = [(c.seq, c.row_id, c.op, c) for c in got_changes.get(group, [])]
        assert [(s, r, o) for s, r, o, _ in product] == [(s, r, o) for s, r, o, _ in changes], (
            where, [(s, r, o) for s, r, o, _ in product], [(s, r, o) for s, r, o, _ in changes])
        for (_, rid, _, c), (_, _, _, values) in zip(product, changes):
            for col in SCHEMA.columns:
                assert _same(col.type, getattr(c, col.name), values[col.name]), (
                    where, rid, col.name, getattr(c, col.name), values[col.name])
        info, row = got_sessions[group]
        assert (info["status"], row.seq) == (status, last_seq), (where, info, row.seq, status, last_seq)
    # Every record has its verdict: applied (its session's changes) or recorded, never lost.
    verdicts = {o for rec in want.values() for _, o in rec[0]}
    applied = {r.offset for r in records if r.offset not in verdicts}
    assert all(by_offset[o].msg.error is None for o in applied)


# No shrinking: each example is a streaming query, and the seed and the mutations drawn (printed)
# are what a failure needs to be found again.
@settings(max_examples=EXAMPLES, deadline=None, print_blob=True, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@seed(SEED)
@given(records=fleet())
def test_every_record_gets_the_models_verdict_and_its_exact_values(spark, records):
    print(f"fuzz seed {SEED} (RECON_FUZZ_SEED={SEED} runs these examples again)")
    records = [judge(r) for r in records]
    note(f"records: {[(r.partition, r.offset, r.key, r.value[:200], r.msg.error) for r in records]}")
    check(records, run_step(spark, records))


# ------------------------------------------------------------------------------------------------
# What the fuzzing found, kept as explicit cases: the parse's verdict on each (both paths).

TS = "2026-11-21T10:00:00Z"
UPDATE = '{"session":"s1","seq":1,"type":"update","ts":"%s","rows":[{"id":"a","values":{"temperature":%s}}]}'
NOT_JSON = "value is not valid JSON"
PAST_DOUBLE = "rows[0].values.temperature expects double, got a number past its range"
FOUND = [
    # Jackson stops at the end of the first value: whatever followed it was ignored, and the
    # record applied as its first object.
    ("object then garbage", UPDATE % (TS, "1.5") + "x", NOT_JSON),
    ("object then another", UPDATE % (TS, "1.5") + ' {"seq": 2}', NOT_JSON),
    ("object then ]", UPDATE % (TS, "1.5") + "]", NOT_JSON),
    ("object then }", UPDATE % (TS, "1.5") + "}", NOT_JSON),
    ("object then ]}", UPDATE % (TS, "1.5") + "]}", NOT_JSON),
    ("object then a comma", UPDATE % (TS, "1.5") + ",", NOT_JSON),
    ("object then NUL", UPDATE % (TS, "1.5") + "\x00", NOT_JSON),
    ("object then a comment", UPDATE % (TS, "1.5") + " // c", NOT_JSON),
    ("object then whitespace", UPDATE % (TS, "1.5") + " \t\r\n", None),
    # A number past the largest double was stored as an infinity (fast path) or as null with no
    # error (checked path).
    ("1e309 for a double", UPDATE % (TS, "1e309"), PAST_DOUBLE),
    ("-1e309 for a double", UPDATE % (TS, "-1e309"), PAST_DOUBLE),
    ("an integer past the largest double", UPDATE % (TS, "1" + "0" * 400), PAST_DOUBLE),
    ("just past the largest double", UPDATE % (TS, "1.7976931348623159e308"), PAST_DOUBLE),
    ("the largest double", UPDATE % (TS, "1.7976931348623157e308"), None),
    ("a number that rounds to the largest double", UPDATE % (TS, "1.7976931348623158e308"), None),
    ("a number below the smallest double is zero", UPDATE % (TS, "1e-400"), None),
    # Refused already, kept: repeated keys are never one of their values.
    ("repeated envelope key", '{"session":"s1","seq":1,"seq":2,"type":"update","ts":"%s"}' % TS, NOT_JSON),
    ("repeated column", UPDATE % (TS, '1.5, "temperature": 2.5'), NOT_JSON),
    ("NaN for a double", UPDATE % (TS, "NaN"), NOT_JSON),
    # A seq written as a double was reported as the record's seq (1.0 as 1).
    ("a seq that is a double", '{"session":"s1","seq":1.0,"type":"update","ts":"%s"}' % TS,
     "seq must be an integer"),
]


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "checked"])
def test_what_the_fuzzing_found(spark, fast_path):
    kafka_ts = dt.datetime(2026, 11, 21, 10, 0, 0)
    df = spark.createDataFrame([(TOPIC, 0, i, kafka_ts, b"s1", v.encode()) for i, (_, v, _) in enumerate(FOUND)],
                               KAFKA_DDL)
    errors: dict = {}
    seqs: dict = {}
    for r in parse_records(df, SCHEMA, fast_path=fast_path).select("offset", "error", "temperature", "seq").collect():
        errors.setdefault(r.offset, set()).add(r.error)
        seqs[r.offset] = r.seq
        assert r.temperature is None or math.isfinite(r.temperature), (FOUND[r.offset][0], r.temperature)
    for i, (name, value, reason) in enumerate(FOUND):
        assert errors[i] == {reason}, (name, errors[i])
        judged = judge(Record(0, i, b"s1", value.encode()))
        assert (judged.msg.error is None) == (reason is None), (name, judged.msg.error)
        if name == "a seq that is a double":
            assert seqs[i] is None, (name, seqs[i])  # the record names no seq, never 1


def test_deep_object_does_not_crash_the_query(spark):
    """Spark's schema_of_variant recurses once per level: objects nested up to the parser's limit
    (the message's four levels, the value's, and the trailing-content check's one) are a wrong type,
    deeper ones not valid JSON; neither overflows the task's stack (``engine.THREAD_STACK``)."""
    for depth, reason in ((900, "rows[0].values.temperature expects double"),
                          (994, "rows[0].values.temperature expects double"),
                          (996, "value is not valid JSON")):
        value = UPDATE % (TS, _deep(depth, "object"))
        df = spark.createDataFrame([(TOPIC, 0, 0, dt.datetime(2026, 11, 21, 10), b"s1", value.encode())], KAFKA_DDL)
        [row] = parse_records(df, SCHEMA).select("error").collect()
        assert row.error.startswith(reason), (depth, row.error)
