"""One Kafka record to the core's input rows, without Spark.

The test kit and ``reconstructor check`` run without a JVM, yet must judge a record exactly as the
pipeline does.  ``reconstructor.spark.parse`` is this parse's Spark twin: ``parse_record`` gives the
rows ``parse_records(..., fast_path=False)`` gives, value for value and error text for error text,
and a differential property test holds the two equal.  So this module reads JSON as Spark's
``try_parse_json`` does (its limits, its VARIANT's decimals and doubles) and prints values and types
as Spark's ``to_json`` and ``schema_of_variant`` do (doubles as Java 17's ``Double.toString``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import struct
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.frames import VALUE
from reconstructor.core.timestamps import RFC3339_PATTERN

__all__ = ["KafkaRecord", "parse_frame", "parse_record"]

ENVELOPE_FIELDS = ("session", "seq", "type", "ts", "rows")
ROW_FIELDS = ("id", "op", "values")
#: The parse's columns before the row columns, in ``parse_records``' order.
COLUMNS = ("topic", "group_session", "partition", "offset", "kafka_ts", "key", "session", "seq", "type",
           "event_ts", "row_pos", "row_id", "op", "error")
# The times the pipeline carries (``reconstructor.spark.parse``): whole days in epoch microseconds.
TS_RANGE_US = 9223286400000000
TS_RANGE_TEXT = "1677-09-22T00:00:00Z..2262-04-11T00:00:00Z"
_OUT_OF_RANGE = f" is outside the supported range {TS_RANGE_TEXT}"
_EPOCH = dt.datetime(1970, 1, 1)
_LONG_MIN, _LONG_MAX = -2**63, 2**63 - 1


@dataclass(frozen=True)
class KafkaRecord:
    """One record as the Kafka source hands it over; ``timestamp`` is aware UTC."""

    topic: str
    partition: int
    offset: int
    timestamp: dt.datetime
    key: bytes | None
    value: bytes | None


# ------------------------------------------------------------------------------------------------
# Java 17's Double.toString (``FloatingDecimal``), which ``to_json`` prints a double with: it is not
# always the shortest text (1e23 prints as 9.999999999999999E22).

_N_5_BITS = (0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28, 31, 33, 35, 38, 40, 42, 45, 47, 49, 52, 54, 56, 59,
             61)
_INSIGNIFICANT_FOR_POW2 = (0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 8, 8, 8,
                           9, 9, 9, 9, 10, 10, 10, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 14, 14, 14, 15, 15, 15,
                           15, 16, 16, 16, 17, 17, 17, 18, 18, 18, 19)


def _wrap(x: int, bits: int) -> int:
    """``x`` as a Java int (32) or long (64) holds it, overflow included."""
    half = 1 << (bits - 1)
    return ((x + half) % (1 << bits)) - half


def java_double(d: float) -> str:
    """``d`` as Java 17's ``Double.toString`` prints it."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    bits = struct.unpack("<Q", struct.pack("<d", d))[0]
    sign = "-" if bits >> 63 else ""
    fract, bin_exp = bits & ((1 << 52) - 1), (bits >> 52) & 0x7FF
    if bin_exp == 0:
        if fract == 0:
            return sign + "0.0"
        leading = 64 - fract.bit_length()
        fract <<= leading - 11
        bin_exp, significant = 1 - (leading - 11), 64 - leading
    else:
        fract |= 1 << 52
        significant = 53
    digits, exponent = _dtoa(bin_exp - 1023, fract, significant)
    return sign + _java_chars(digits, exponent)


def _dtoa(bin_exp: int, fract: int, significant: int) -> tuple[list[int], int]:
    """FloatingDecimal's dtoa: the digits and the decimal exponent (of 0.d1d2...)."""
    tail = (fract & -fract).bit_length() - 1
    n_fract = 53 - tail
    n_tiny = max(0, n_fract - bin_exp - 1)
    if -21 <= bin_exp <= 62 and n_tiny < len(_N_5_BITS) and n_fract + _N_5_BITS[n_tiny] < 64 and n_tiny == 0:
        insignificant = 0
        if bin_exp > significant:
            p2 = bin_exp - significant - 1
            insignificant = _INSIGNIFICANT_FOR_POW2[p2] if 1 < p2 < len(_INSIGNIFICANT_FOR_POW2) else 0
        value = fract << (bin_exp - 52) if bin_exp >= 52 else fract >> (52 - bin_exp)
        return _long_digits(value, insignificant)
    d2 = struct.unpack("<d", struct.pack("<Q", (1023 << 52) | (fract & ((1 << 52) - 1))))[0]
    dec_exp = math.floor((d2 - 1.5) * 0.289529654 + 0.176091259 + float(bin_exp) * 0.301029995663981)
    b5 = max(0, -dec_exp)
    b2 = b5 + n_tiny + bin_exp
    s5 = max(0, dec_exp)
    s2 = s5 + n_tiny
    m5, m2 = b5, b2 - significant
    fract >>= tail
    b2 -= n_fract - 1
    common = min(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common
    if n_fract == 1:
        m2 -= 1
    if m2 < 0:
        b2, s2, m2 = b2 - m2, s2 - m2, 0
    b_bits = n_fract + b2 + (_N_5_BITS[b5] if b5 < len(_N_5_BITS) else b5 * 3)
    ten_s_bits = s2 + 1 + (_N_5_BITS[s5 + 1] if s5 + 1 < len(_N_5_BITS) else (s5 + 1) * 3)
    digits: list[int] = []
    if b_bits < 64 and ten_s_bits < 64:
        width = 32 if b_bits < 32 and ten_s_bits < 32 else 64
        b = _wrap(_wrap(fract * 5**b5, width) << b2, width)
        s = _wrap(5**s5 << s2, width)
        m = _wrap(5**m5 << m2, width)
        tens = _wrap(s * 10, width)
        q, b, m = b // s, _wrap(10 * (b % s), width), _wrap(m * 10, width)
        low, high = b < m, _wrap(b + m, width) > tens
        if q == 0 and not high:
            dec_exp -= 1
        else:
            digits.append(q)
        if dec_exp < -3 or dec_exp >= 8:
            low = high = False
        while not low and not high:
            q, b, m = b // s, _wrap(10 * (b % s), width), _wrap(m * 10, width)
            if m > 0:
                low, high = b < m, _wrap(b + m, width) > tens
            else:
                low = high = True
            digits.append(q)
        low_difference = _wrap(_wrap(b << 1, width) - tens, width)
    else:
        big_s = 5**s5 << s2
        big_b = fract * 5**b5 << b2
        big_m = 5**(m5 + 1) << (m2 + 1)
        ten_s = 5**(s5 + 1) << (s2 + 1)
        q, big_b = big_b // big_s, (big_b % big_s) * 10
        low, high = big_b < big_m, big_b + big_m >= ten_s
        if q == 0 and not high:
            dec_exp -= 1
        else:
            digits.append(q)
        if dec_exp < -3 or dec_exp >= 8:
            low = high = False
        while not low and not high:
            q, big_b = big_b // big_s, (big_b % big_s) * 10
            big_m *= 10
            low, high = big_b < big_m, big_b + big_m >= ten_s
            digits.append(q)
        low_difference = (big_b << 1) - ten_s if high and low else 0
    exponent = dec_exp + 1
    if high and (not low or low_difference > 0 or (low_difference == 0 and digits[-1] % 2)):
        exponent = _round_up(digits, exponent)
    return digits, exponent


def _round_up(digits: list[int], exponent: int) -> int:
    i = len(digits) - 1
    while digits[i] == 9 and i > 0:
        digits[i] = 0
        i -= 1
    if digits[i] == 9:
        digits[0] = 1
        return exponent + 1
    digits[i] += 1
    return exponent


def _long_digits(value: int, insignificant: int) -> tuple[list[int], int]:
    exponent = 0
    if insignificant:
        pow10 = 10**insignificant
        residue = value % pow10
        value //= pow10
        exponent += insignificant
        if residue >= pow10 >> 1:
            value += 1
    text = str(value)
    return [int(c) for c in text.rstrip("0")], exponent + len(text)


def _java_chars(digits: list[int], exponent: int) -> str:
    text = "".join(map(str, digits))
    if 0 < exponent < 8:
        head = text[:exponent]
        if len(head) < exponent:
            return head + "0" * (exponent - len(head)) + ".0"
        return head + "." + (text[exponent:] or "0")
    if -3 < exponent <= 0:
        return "0." + "0" * -exponent + text
    power = f"-{1 - exponent}" if exponent <= 0 else str(exponent - 1)
    return text[0] + "." + (text[1:] or "0") + "E" + power


# ------------------------------------------------------------------------------------------------
# JSON into Spark's VARIANT: None (JSON null), bool, int (a long), VariantDecimal, float, str, dict (keys
# in the variant's order), list.  ``_NULL`` is SQL NULL: absent, or no value at all.


class _Null:
    def __repr__(self) -> str:
        return "NULL"


_NULL: Any = _Null()


@dataclass(frozen=True)
class VariantDecimal:
    """A variant decimal as Spark reads it back: trailing zeros stripped (``unscaled * 10**-scale``)."""

    unscaled: int
    scale: int

    @property
    def precision_scale(self) -> tuple[int, int]:
        """Spark's ``DecimalType`` of the value (precision never below the scale, scale never negative)."""
        precision = len(str(abs(self.unscaled)))
        if precision < self.scale:
            return self.scale, self.scale
        if self.scale < 0:
            return precision - self.scale, 0
        return precision, self.scale

    def plain(self) -> str:
        """Java's ``BigDecimal.toPlainString``."""
        if self.scale <= 0:
            return str(self.unscaled * 10**-self.scale)
        digits = str(abs(self.unscaled)).rjust(self.scale + 1, "0")
        sign = "-" if self.unscaled < 0 else ""
        return f"{sign}{digits[:-self.scale]}.{digits[-self.scale:]}"


class _Invalid(Exception):
    """Private to this module: the text is not JSON that ``try_parse_json`` (and the trailing-content
    check) takes; ``parse_variant`` turns it into None."""


MAX_DEPTH = 999  # Jackson's 1000, less the level the trailing-content check wraps the value in
MAX_NUMBER_DIGITS = 1000
MAX_NAME_LENGTH = 50000
#: Jackson's longest string (``StreamReadConstraints``), in UTF-16 code units of the string as
#: decoded, wherever it lies in the value: one longer makes ``try_parse_json`` null.
MAX_STRING_LENGTH = 20_000_000
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON string literal; each run of plain characters is taken at once (a message's text may be
#: tens of millions of characters).
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _key_order(key: str) -> bytes:
    """Java's ``String.compareTo`` order: UTF-16 code units."""
    return key.encode("utf-16-be", "surrogatepass")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Invalid("a key repeats")
    for k in keys:
        if _SURROGATE.search(k) or len(_key_order(k)) // 2 > MAX_NAME_LENGTH:
            raise _Invalid("bad key")
    return dict(sorted(pairs, key=lambda kv: _key_order(kv[0])))


def _integer(text: str) -> Any:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _Invalid("number too long")
    value = int(text)
    return value if _LONG_MIN <= value <= _LONG_MAX else _floating(text)


def _fraction(text: str) -> Any:
    if sum(c.isdigit() for c in text) > MAX_NUMBER_DIGITS:
        raise _Invalid("number too long")
    return _floating(text)


def _floating(text: str) -> Any:
    """A number that is no long: a decimal when it has no exponent and fits 38 digits, else a double."""
    if "e" not in text and "E" not in text:
        whole, _, fraction = text.lstrip("-").partition(".")
        unscaled = int(whole + fraction)
        if len(fraction) <= 38 and len(str(unscaled)) <= 38:
            scale = len(fraction)
            if unscaled == 0:
                return VariantDecimal(0, 0)
            while unscaled % 10 == 0:
                unscaled //= 10
                scale -= 1
            return VariantDecimal(-unscaled if text.startswith("-") else unscaled, scale)
    return float(text)


def _constant(name: str) -> Any:
    raise _Invalid(f"{name} is not JSON")


def _depth(text: str) -> int:
    depth = deepest = 0
    for c in _STRINGS.sub("", text):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


@contextmanager
def _deep_recursion() -> Iterator[None]:
    """Room for values nested ``MAX_DEPTH`` deep (parsing them, and printing their types)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 1000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _too_long(s: str) -> bool:
    """Longer than Jackson's longest string: a character past U+FFFF is two UTF-16 code units."""
    return len(s) > MAX_STRING_LENGTH // 2 and len(s.encode("utf-16-le", "surrogatepass")) // 2 > MAX_STRING_LENGTH


def _check_strings(value: Any) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise _Invalid("a lone surrogate is no character")
            if _too_long(v):
                raise _Invalid("a string longer than Jackson's longest")
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def parse_variant(text: str | None) -> Any:
    """``text`` read as ``try_parse_json`` behind the trailing-content check reads it; ``_NULL`` when
    it is not one JSON value."""
    if text is None or _depth(text) > MAX_DEPTH:
        return _NULL
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_int=_integer, parse_float=_fraction,
                           parse_constant=_constant)
        _check_strings(value)
    except (_Invalid, ValueError, RecursionError):
        return _NULL
    return value


# ------------------------------------------------------------------------------------------------
# What Spark's variant functions make of a value.

_DECIMAL_OF_LONG = (20, 0)


def _type(v: Any) -> Any:
    """``schema_of_variant``'s type, as a tree: a name, ("DECIMAL", p, s), ("ARRAY", t), ("OBJECT", {k: t})."""
    if v is None:
        return "VOID"
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT"
    if isinstance(v, VariantDecimal):
        return ("DECIMAL", *v.precision_scale)
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, str):
        return "STRING"
    if isinstance(v, dict):
        return ("OBJECT", {k: _type(x) for k, x in v.items()})
    element: Any = "VOID"
    for x in v:
        element = _merge(element, _type(x))
    return ("ARRAY", element)


def _merge(a: Any, b: Any) -> Any:
    if a == b:
        return a
    if a == "VOID":
        return b
    if b == "VOID":
        return a
    numeric = ("BIGINT", "DOUBLE")
    if (a in numeric or a[0] == "DECIMAL") and (b in numeric or b[0] == "DECIMAL"):
        if "DOUBLE" in (a, b):
            return "DOUBLE"
        (p1, s1), (p2, s2) = (_DECIMAL_OF_LONG if t == "BIGINT" else t[1:] for t in (a, b))
        scale = max(s1, s2)
        whole = max(p1 - s1, p2 - s2)
        return "DOUBLE" if whole + scale > 38 else ("DECIMAL", whole + scale, scale)
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "ARRAY":
        return ("ARRAY", _merge(a[1], b[1]))
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "OBJECT":
        fields = dict(a[1])
        for k, t in b[1].items():
            fields[k] = _merge(fields[k], t) if k in fields else t
        return ("OBJECT", dict(sorted(fields.items(), key=lambda kv: _key_order(kv[0]))))
    return "VARIANT"


_PLAIN_NAME = re.compile("[A-Za-z_][A-Za-z0-9_]*")


def _type_text(t: Any) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "DECIMAL":
        return f"DECIMAL({t[1]},{t[2]})"
    if t[0] == "ARRAY":
        return f"ARRAY<{_type_text(t[1])}>"
    names = (k if _PLAIN_NAME.fullmatch(k) else "`" + k.replace("`", "``") + "`" for k in t[1])
    return "OBJECT<" + ", ".join(f"{n}: {_type_text(x)}" for n, x in zip(names, t[1].values())) + ">"


def schema_of(v: Any) -> Any:
    """``schema_of_variant``: SQL NULL for SQL NULL."""
    return _NULL if v is _NULL else _type_text(_type(v))


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TO_ESCAPE = re.compile('["\\\\\x00-\x1f]')


def _quoted(s: str) -> str:
    """A string as Jackson writes it."""
    return '"' + _TO_ESCAPE.sub(lambda m: _ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04X}", s) + '"'


def to_json(v: Any) -> Any:
    """``to_json`` of a variant (SQL NULL for SQL NULL)."""
    if v is _NULL:
        return _NULL
    if v is None:
        return "null"
    if isinstance(v, float) and math.isinf(v):
        return _quoted(java_double(v))
    if isinstance(v, str):
        return _quoted(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{_quoted(k)}:{to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(to_json(x) for x in v) + "]"
    return _scalar_text(v)


def _scalar_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, VariantDecimal):
        return v.plain()
    return java_double(v)


def as_string(v: Any) -> str | None:
    """``try_variant_get(v, '$', 'string')``."""
    if v is _NULL or v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return str(to_json(v))
    return _scalar_text(v)


_TRUE, _FALSE = ("t", "true", "y", "yes", "1"), ("f", "false", "n", "no", "0")
_TRIMMED = "".join(map(chr, range(0x21))) + "\x7f"


def as_boolean(v: Any) -> bool | None:
    """``try_variant_get(v, '$', 'boolean')``: numbers are true when not zero, strings by their words."""
    if v is _NULL or v is None or isinstance(v, (dict, list)):
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, VariantDecimal):
        return v.unscaled != 0
    if isinstance(v, (int, float)):
        return v != 0
    word = v.strip(_TRIMMED).lower()
    return True if word in _TRUE else False if word in _FALSE else None


def as_double(v: Any) -> float | None:
    """``try_cast(to_json(v) AS DOUBLE)``: numbers only, and no infinity (its JSON is a string)."""
    if isinstance(v, bool) or v is _NULL or v is None:
        return None
    if isinstance(v, int):
        return float(v)
    if isinstance(v, VariantDecimal):
        return float(v.plain())
    if isinstance(v, float):
        return None if math.isinf(v) else v
    return None


def as_long(v: Any) -> int | None:
    """``try_cast(to_json(v) AS BIGINT)``: integers, and decimals whose text is one."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, VariantDecimal) and v.scale <= 0:
        value = v.unscaled * 10**-v.scale
        return value if _LONG_MIN <= value <= _LONG_MAX else None
    return None


def get(v: Any, *path: str) -> Any:
    """``variant_get(v, '$.a.b')``: SQL NULL when a step is missing or no object."""
    for name in path:
        if not isinstance(v, dict) or name not in v:
            return _NULL
        v = v[name]
    return v


def _present(v: Any) -> bool:
    """Present and not JSON null."""
    return v is not _NULL and v is not None


# ------------------------------------------------------------------------------------------------
# RFC 3339 text to epoch microseconds, as ``reconstructor.spark.timestamps`` (Spark's calendar:
# proleptic Gregorian from year 0; hours 00-23).

_RFC3339 = re.compile(RFC3339_PATTERN)


def _days_from_civil(year: int, month: int, day: int) -> int:
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def rfc3339_micros(text: str | None) -> int | None:
    """The instant ``text`` names in epoch microseconds, None when it is no RFC 3339 time."""
    m = _RFC3339.fullmatch(text) if text is not None else None
    if m is None:
        return None
    date, hour, minute, second, fraction, offset = m.groups()
    day, shift = _day_seconds(date), _offset_seconds(offset)
    h, mi, s = int(hour), int(minute), int(second)
    if day is None or shift is None or h > 23 or mi > 59 or s > 60:
        return None
    seconds = day + h * 3600 + mi * 60 + min(s, 59) + (s == 60) - shift
    return seconds * 1_000_000 + (int((fraction + "000000")[:6]) if fraction else 0)


@functools.lru_cache(maxsize=4096)
def _day_seconds(date: str) -> int | None:
    """A ``YYYY-MM-DD`` day's first second since 1970, None for no such day (many times share one)."""
    year, month, day = int(date[:4]), int(date[5:7]), int(date[8:10])
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)):
        return None
    return _days_from_civil(year, month, day) * 86400


@functools.lru_cache(maxsize=1024)
def _offset_seconds(offset: str) -> int | None:
    """An offset (``Z``, ``+hh:mm``, ``-hh:mm``) in seconds east of UTC, None when out of range."""
    if offset in ("Z", "z"):
        return 0
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    if hours > 23 or minutes > 59:
        return None
    return (hours * 3600 + minutes * 60) * (1 if offset[0] == "+" else -1)


def _in_range(micros: int) -> bool:
    return -TS_RANGE_US <= micros <= TS_RANGE_US


def _time(micros: int | None) -> dt.datetime | None:
    """A time the pipeline carries, as a naive UTC datetime (as Spark collects it); None outside."""
    if micros is None or not _in_range(micros):
        return None
    return _EPOCH + dt.timedelta(microseconds=micros)


# ------------------------------------------------------------------------------------------------
# The parse.


def _first_unknown(fields: Any, allowed: Iterable[str]) -> str | None:
    if not isinstance(fields, dict):
        return None
    return next((k for k in fields if k not in allowed), None)


def _envelope_error(msg: Any, event_us: int | None) -> str | None:
    """The first of the envelope's checks the message fails (``_envelope_error`` in Spark)."""
    if msg is _NULL:
        return "value is not valid JSON"
    if not isinstance(msg, dict):
        return f"value is a JSON {schema_of(msg)}, not an object"
    unknown = _first_unknown(msg, ENVELOPE_FIELDS)
    if unknown is not None:
        return f"unknown field {unknown}"
    session, seq, kind, ts, rows = (get(msg, f) for f in ENVELOPE_FIELDS)
    if schema_of(session) != "STRING":
        return "session must be a string"
    if session == "":
        return "session must be a non-empty string"
    if schema_of(seq) != "BIGINT":
        return "seq must be an integer"
    if seq < 0:
        return "seq must not be negative"
    if schema_of(kind) != "STRING" or kind not in ("snapshot", "update", "end"):
        return f"type must be snapshot, update or end, got {'nothing' if kind is _NULL else to_json(kind)}"
    if schema_of(ts) != "STRING" or event_us is None:
        return "ts must be an RFC 3339 timestamp string"
    if not _in_range(event_us):
        return f"ts {ts[:60]}{_OUT_OF_RANGE}"
    if _present(rows) and not isinstance(rows, list):
        return "rows must be an array"
    if kind == "end" and isinstance(rows, list) and rows:
        return "an end message carries no rows"
    return None


def _column_ok(col_type: str, json_type: str, value: Any) -> bool:
    if col_type == "double":
        return json_type in ("BIGINT", "DOUBLE") or json_type.startswith("DECIMAL")
    if col_type == "long":
        return json_type == "BIGINT"
    if col_type == "boolean":
        return json_type == "BOOLEAN"
    if col_type == "timestamp":
        return json_type == "STRING" and value is not None
    return json_type == "STRING"


def _column_value(col_type: str, v: Any) -> Any:
    """A column's value as Spark reads it from the variant (a time as epoch microseconds)."""
    if col_type == "double":
        return as_double(v)
    if col_type == "long":
        return as_long(v)
    if col_type == "boolean":
        return as_boolean(v)
    if col_type == "timestamp":
        return rfc3339_micros(as_string(v))
    return as_string(v)


def _row_error(row: Any, schema: RowSchema, values: dict[str, Any]) -> str | None:
    """A row's first failing check, without its ``rows[<pos>`` prefix."""
    if not isinstance(row, dict):
        return "] is not an object"
    unknown = _first_unknown(row, ROW_FIELDS)
    if unknown is not None:
        return f"] has unknown field {unknown}"
    row_id, op, fields = get(row, "id"), get(row, "op"), get(row, "values")
    if schema_of(row_id) != "STRING" or row_id == "":
        return "].id must be a non-empty string"
    if op is not _NULL and (schema_of(op) != "STRING" or op not in ("upsert", "delete")):
        return "].op must be upsert or delete"
    if op == "delete" and _present(fields):
        return "] is a delete and carries values"
    if _present(fields) and not isinstance(fields, dict):
        return "].values must be an object"
    unknown = _first_unknown(fields, schema.names)
    if unknown is not None:
        return f"].values has unknown column {unknown}"
    for col in schema.columns:
        v = get(fields, col.name)
        json_type = schema_of(v)
        if not _present(v):
            continue
        value = values[col.name]
        if not _column_ok(col.type, json_type, value):
            return f"].values.{col.name} expects {col.type}, got {json_type} {to_json(v)[:60]}"
        if col.type == "timestamp" and not _in_range(value):
            return f"].values.{col.name} {str(as_string(v))[:60]}{_OUT_OF_RANGE}"
        if col.type == "double" and value is None:
            return f"].values.{col.name} expects double, got a number past its range"
    return None


def _op(op: str | None) -> str:
    return "upsert" if op is None else op


def _micros_of(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def _record_error(record: KafkaRecord, bad_key: bool, bad_value: bool, kafka_us: int) -> str | None:
    if bad_key:
        return "Kafka key is not valid UTF-8"
    if bad_value:
        return "Kafka value is not valid UTF-8"
    if not _in_range(kafka_us):
        return f"Kafka timestamp {kafka_us // 1000} ms{_OUT_OF_RANGE}"
    return None


def _decode(data: bytes | None) -> tuple[str | None, bool]:
    """The bytes as text with each bad byte replaced (``make_valid_utf8``), and whether any was."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def parse_record(record: KafkaRecord, schema: RowSchema, *, keep_value: bool = False,
                 fast_path: bool = True) -> list[dict[str, Any]]:
    """The rows ``parse_records(..., keep_values=keep_value)`` gives for ``record``: its columns in
    their order, each value as a Spark ``collect()`` gives it (times naive UTC).

    A message the fast path vouches for (``_vouched_rows``: the contract's shape, plain JSON) is
    read once by ``json``, as Spark's fast path reads it with ``from_json``; any other takes the
    exhaustive reading that names what is wrong.  ``fast_path=False`` reads every record
    exhaustively, as ``parse_records(..., fast_path=False)`` does (the two differ only in the sign
    of a double zero, which the exhaustive reading takes as a decimal, and so without one)."""
    key, bad_key = _decode(record.key)
    text, bad_value = _decode(record.value)
    kafka_us = _micros_of(record.timestamp)
    if fast_path and not (bad_key or bad_value) and text is not None and _in_range(kafka_us):
        vouched = _vouched_rows(record, schema, key, text, keep_value, kafka_us)
        if vouched is not None:
            return vouched
    with _deep_recursion():
        msg = _NULL if bad_value else parse_variant(text)
        return _rows(record, schema, msg, key, text, keep_value,
                     _record_error(record, bad_key, bad_value, kafka_us), kafka_us)


class _NotVouched(Exception):
    """Private to this module: the fast path does not vouch for the message (the exhaustive
    reading decides it)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotVouched
    return out


def _refuse(_: str) -> Any:
    raise _NotVouched


def _short_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise _NotVouched
    return float(text)


def _short_int(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise _NotVouched
    return int(text)


#: The fast path's JSON readers: a text no longer than the parser's longest number holds no number
#: past it, so only a longer text pays for a check of each number.
_SHORT = json.JSONDecoder(object_pairs_hook=_unique, parse_constant=_refuse)
_LONG = json.JSONDecoder(object_pairs_hook=_unique, parse_constant=_refuse, parse_float=_short_float,
                         parse_int=_short_int)
_TYPES = frozenset(("snapshot", "update", "end"))
_OPS = frozenset(("upsert", "delete"))


def _vouched_rows(record: KafkaRecord, schema: RowSchema, key: str | None, text: str, keep_value: bool,
                  kafka_us: int) -> list[dict[str, Any]] | None:
    """The rows of a message of the contract's shape whose every value is of its column's type, read
    by ``json`` in one pass; None for any other message: the exhaustive reading decides it.  So it
    leaves to that reading a lone surrogate (an escape ``\\u`` that ``json`` takes and Spark does
    not), a number past the parser's length, a repeated key, NaN, an infinity and trailing content
    (``json`` refuses it)."""
    try:
        msg = (_SHORT if len(text) <= MAX_NUMBER_DIGITS else _LONG).decode(text)
    except (_NotVouched, ValueError, RecursionError):
        return None
    if "\\u" in text and _has_surrogate(msg):
        return None
    if len(text) > MAX_STRING_LENGTH // 2 and _has_long_string(msg):
        return None
    if type(msg) is not dict or not msg.keys() <= _ENVELOPE_SET:
        return None
    session, seq, kind, ts, rows = (msg.get(f) for f in ENVELOPE_FIELDS)
    if type(session) is not str or not session or type(seq) is not int or not 0 <= seq <= _LONG_MAX:
        return None
    if type(kind) is not str or kind not in _TYPES or type(ts) is not str:
        return None
    event_us = rfc3339_micros(ts)
    if event_us is None or not _in_range(event_us):
        return None
    if rows is None:
        rows = []
    elif type(rows) is not list or (kind == "end" and rows):
        return None
    envelope = {"topic": record.topic, "group_session": session, "partition": record.partition,
                "offset": record.offset, "kafka_ts": _time(kafka_us), "key": key, "session": session,
                "seq": seq, "type": kind, "event_ts": _time(event_us)}
    columns = {c.name: _VOUCHED_VALUE[c.type] for c in schema.columns}
    out: list[dict[str, Any]] = []
    for pos, row in enumerate(rows):
        if type(row) is not dict or not row.keys() <= _ROW_SET:
            return None
        row_id, op, fields = row.get("id"), row.get("op", "upsert"), row.get("values")
        if type(row_id) is not str or not row_id or type(op) is not str or op not in _OPS:
            return None
        if fields is None:
            fields = {}
        elif type(fields) is not dict or op == "delete" or not fields.keys() <= columns.keys():
            return None
        built = dict(envelope)
        built.update(row_pos=pos, row_id=row_id, op=op, error=None)
        for name, vouched in columns.items():
            v = fields.get(name)
            if v is not None:
                v = vouched(v)
                if v is _REFUSED:
                    return None
            built[name] = v
        out.append(built)
    if not out:
        out.append({**envelope, "row_pos": None, "row_id": None, "op": "upsert", "error": None,
                    **dict.fromkeys(columns)})
    if keep_value:
        for i, row in enumerate(out):
            row[VALUE] = text if i == 0 else None
    return out


def _has_surrogate(value: Any) -> bool:
    """A string of ``value`` (a key too) holds a lone surrogate, which is no character."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in v):
                return True
        elif isinstance(v, dict):
            stack += [*v.keys(), *v.values()]
        elif isinstance(v, list):
            stack += v
    return False


def _has_long_string(value: Any) -> bool:
    """A string of ``value`` is longer than Jackson's longest (only a text longer than half of it
    can hold one: a character is at most two UTF-16 code units, and an escape is more text)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _too_long(v):
                return True
        elif isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, list):
            stack += v
    return False


_REFUSED: Any = object()
_ENVELOPE_SET = frozenset(ENVELOPE_FIELDS)
_ROW_SET = frozenset(ROW_FIELDS)


def _vouched_double(v: Any) -> Any:
    kind = type(v)
    if kind is float:
        return v if math.isfinite(v) else _REFUSED
    if kind is not int:
        return _REFUSED
    try:
        return float(v)  # correctly rounded, as Spark's JSON reader rounds an integer literal
    except OverflowError:  # past the largest double: the exhaustive reading names it
        return _REFUSED


def _vouched_long(v: Any) -> Any:
    return v if type(v) is int and _LONG_MIN <= v <= _LONG_MAX else _REFUSED


def _vouched_boolean(v: Any) -> Any:
    return v if type(v) is bool else _REFUSED


def _vouched_timestamp(v: Any) -> Any:
    micros = rfc3339_micros(v) if type(v) is str else None
    return _time(micros) if micros is not None and _in_range(micros) else _REFUSED


def _vouched_string(v: Any) -> Any:
    return v if type(v) is str else _REFUSED


#: A JSON value of the column's type as the column holds it, else ``_REFUSED``.
_VOUCHED_VALUE = {"double": _vouched_double, "long": _vouched_long, "boolean": _vouched_boolean,
                  "timestamp": _vouched_timestamp, "string": _vouched_string}


def _rows(record: KafkaRecord, schema: RowSchema, msg: Any, key: str | None, text: str | None,
          keep_value: bool, record_error: str | None, kafka_us: int) -> list[dict[str, Any]]:
    session = as_string(get(msg, "session"))
    seq = get(msg, "seq")
    event_us = rfc3339_micros(as_string(get(msg, "ts")))
    env_error = _envelope_error(msg, event_us)
    rows = get(msg, "rows")
    envelope = {
        "topic": record.topic, "group_session": session or key or None, "partition": record.partition,
        "offset": record.offset, "kafka_ts": _time(kafka_us), "key": key, "session": session,
        "seq": seq if schema_of(seq) == "BIGINT" else None, "type": as_string(get(msg, "type")),
        "event_ts": _time(event_us),
    }
    exploded = list(enumerate(rows)) if isinstance(rows, list) and rows else [(None, _NULL)]
    out = []
    for pos, row in exploded:
        fields = get(row, "values")
        values = {c.name: _column_value(c.type, get(fields, c.name)) for c in schema.columns}
        row_error = None
        if env_error is None and row is not _NULL:
            reason = _row_error(row, schema, values)
            row_error = None if reason is None else f"rows[{pos}{reason}"
        out_row = {**envelope, "row_pos": pos, "row_id": as_string(get(row, "id")),
                   "op": _op(as_string(get(row, "op"))), "error": record_error or env_error or row_error}
        for c in schema.columns:
            v = values[c.name]
            out_row[c.name] = _time(v) if c.type == "timestamp" else v
        if keep_value:
            out_row[VALUE] = text if not pos else None
        out.append(out_row)
    return out


_DTYPES = {"partition": "int64", "offset": "int64", "seq": "Int64", "row_pos": "Int64",
           "kafka_ts": "datetime64[ns]", "event_ts": "datetime64[ns]"}
_COLUMN_DTYPES = {"double": "float64", "long": "Int64", "boolean": "boolean", "timestamp": "datetime64[ns]"}


def parse_frame(records: Iterable[KafkaRecord], schema: RowSchema, *, keep_value: bool = False) -> pd.DataFrame:
    """All the records' rows, in the dtypes the core takes (exact ints, nullable ``Int64`` for the
    longs that may be null, naive UTC ``datetime64[ns]``)."""
    names = [*COLUMNS, *schema.names, *([VALUE] if keep_value else [])]
    rows = [r for record in records for r in parse_record(record, schema, keep_value=keep_value)]
    frame = pd.DataFrame(rows, columns=names)
    dtypes = {**_DTYPES, **{c.name: _COLUMN_DTYPES[c.type] for c in schema.columns if c.type in _COLUMN_DTYPES}}
    return frame.astype(dtypes)
