"""Column names of the core's input and output frames, and one canonical dtype per column type.

The Spark layer hands the core flat pandas frames (one row per message row, see ``INPUT``), and
takes back flat frames of row changes (``CHANGE``).  Canonical dtypes keep frames from different
sources (Arrow from Spark, the state blob, tests) concatenable without object-dtype drift.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd

from reconstructor.contract.row_schema import RowSchema

# One row per row of a message; a message without rows (an `end`, an empty snapshot) has one row
# with a null row_pos.  `error` is the parse failure of the record, null when it parsed.
#
# The int columns are exact: numpy ints, or pandas' nullable ints (``Int64``) where a column holds
# a null (never float64, which rounds a long past 2**53).  A nullable long (``nullable_longs``:
# seq, null for a malformed record, and the row schema's ``long`` columns) may instead come as its
# value with nulls as 0 and, beside it, a boolean column ``null_mask(name)`` true where it is
# null: that is how the Spark shell hands them over, since pyspark's worker would turn an int
# column holding a null into float64.  ``exact_longs`` rebuilds the nullable column from the two.
# partition and row_pos are INTs (float64 holds them exactly) and offset is never null.
INPUT = ("partition", "offset", "kafka_ts", "key", "session", "seq", "type", "event_ts",
         "row_pos", "row_id", "op", "error")
# In quarantine mode, also the record's raw Kafka value, on its first row only (a snapshot's
# value is its whole table: once per message, not once per row), for the ``violations`` table.
VALUE = "value"

# One row per applied row change.
# `row_pos` orders two changes of one row inside one message (-1: a row a snapshot dropped).
CHANGE = ("partition", "offset", "seq", "type", "row_pos", "row_id", "op", "event_ts", "kafka_ts")
# Of those, the int64 coordinates and the (naive UTC) times.
INT_COLUMNS = ("partition", "offset", "seq", "row_pos")
TIME_COLUMNS = ("kafka_ts", "event_ts")

#: The mark of a null mask column: ``<name>#null`` (a row column's name is an identifier, so it
#: never is one).
NULL_MASK = "#null"

MESSAGE_TYPES = ("snapshot", "update", "end")
OPS = ("upsert", "delete")


def nullable_longs(schema: RowSchema) -> tuple[str, ...]:
    """The input's long columns that may hold a null: seq and the row schema's ``long`` columns."""
    return ("seq", *(c.name for c in schema.columns if c.type == "long"))


def null_mask(name: str) -> str:
    """The name of the boolean column that marks the nulls of the nullable long ``name``."""
    return name + NULL_MASK


def exact_longs(frame: pd.DataFrame, schema: RowSchema) -> pd.DataFrame:
    """``frame`` with each nullable long that comes with a null mask (see ``INPUT``) rebuilt as
    pandas' nullable ``Int64`` from its values and its mask, exactly; seq only where it holds a
    null (a numpy int64 seq is what the short path reads fastest).  No copy: the frame is the
    caller's own (the Spark shell's input frame, gathered), changed in place.  A frame without
    masks is returned as it is."""
    for name in nullable_longs(schema):
        mask_name = null_mask(name)
        if mask_name not in frame.columns:
            continue
        mask = frame[mask_name].to_numpy(dtype=bool)
        if name in INT_COLUMNS and not mask.any():
            continue
        frame[name] = pd.arrays.IntegerArray(frame[name].to_numpy(dtype=np.int64), mask)
    return frame


def _is_naive_datetime(dtype: Any) -> bool:
    return pd.api.types.is_datetime64_dtype(dtype) and not isinstance(dtype, pd.DatetimeTZDtype)


def _to_naive_utc(series: pd.Series) -> pd.Series:
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return cast("pd.Series[Any]", series.dt.tz_convert("UTC").dt.tz_localize(None))
    if _is_naive_datetime(series.dtype):
        return series  # naive times are UTC by contract; to_datetime would only scan them again
    values = pd.to_datetime(series, utc=True, cache=False)
    return values.dt.tz_convert("UTC").dt.tz_localize(None)


def coerce_columns(frame: pd.DataFrame, schema: RowSchema) -> pd.DataFrame:
    """Cast the schema's columns of ``frame`` to the canonical pandas dtypes, in place of a copy.

    A column already in its canonical dtype is left alone: pandas' no-op casts still copy.
    """
    out = {}
    for col in schema.columns:
        cast = canonical(frame[col.name], col.type)
        if cast is not None:
            out[col.name] = cast
    return frame.assign(**out) if out else frame


def canonical(s: pd.Series, col_type: str) -> pd.Series | None:
    """``s`` in the canonical dtype of a row column of ``col_type``, or None when it already is."""
    if col_type == "double":
        return s.astype("float64") if s.dtype != "float64" else None
    if col_type == "long":
        return s.astype("Int64") if s.dtype != "Int64" else None
    if col_type == "boolean":
        return s.astype("boolean") if s.dtype != "boolean" else None
    if col_type == "timestamp":
        return _to_naive_utc(s) if not _is_naive_datetime(s.dtype) else None
    if s.dtype == object:
        values = s.to_numpy()
        nulls = pd.isna(values)
        if not nulls.any() or all(v is None for v in values[nulls]):
            return None  # strings and None already
    # strings, with None (not NaN) for a null
    plain = s.astype(object).where(s.notna(), None)  # type: ignore[call-overload]  # pandas-stubs' `other` leaves out None, which pandas takes
    return cast("pd.Series[Any]", plain)


def coerce_times(frame: pd.DataFrame, names: tuple[str, ...] = TIME_COLUMNS) -> pd.DataFrame:
    out = {n: _to_naive_utc(frame[n]) for n in names
           if n in frame.columns and not _is_naive_datetime(frame[n].dtype)}
    return frame.assign(**out) if out else frame  # assign copies the frame even for a no-op


def change_rows(frame: Any, order: Any, schema: RowSchema) -> dict[str, Any]:
    """The rows of an input ``frame`` (or its columns by name) at positions ``order``, as change
    columns (``CHANGE`` and the row columns: canonical dtypes, int64 coordinates, naive UTC times).

    Columns, not a frame: a take, the casts and a column pick would each copy a frame, and the
    output is built from columns.
    """
    data = {}
    for name in CHANGE:
        s = frame[name]
        if name in INT_COLUMNS:
            data[name] = s.to_numpy(dtype="int64")[order]
        else:
            data[name] = take_values(_to_naive_utc(s) if name in TIME_COLUMNS else s, order)
    for col in schema.columns:
        s = frame[col.name]
        cast = canonical(s, col.type)
        data[col.name] = take_values(s if cast is None else cast, order)
    return data


def take_values(s: pd.Series, order: Any) -> Any:
    """``s``'s values at positions ``order``: a numpy array, or an extension array (Int64, boolean)."""
    return take(values_of(s), order)


def take(values: Any, order: Any) -> Any:
    """``values`` (a numpy or extension array) at positions ``order``."""
    return values[order] if isinstance(values, np.ndarray) else values.take(order)


def values_of(s: pd.Series) -> Any:
    """``s``'s values without a copy: a numpy array, or an extension array (Int64, boolean)."""
    return s.array if isinstance(s.dtype, pd.api.extensions.ExtensionDtype) else s.to_numpy()


def int_or_none(value: Any) -> int | None:
    """A frame's value as a Python int, None where it is null: how a violation names a record's
    partition, offset and seq (a numpy int would not survive its JSON, a null is no number)."""
    return None if value is None or pd.isna(value) else int(value)


def concat_rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` one after the other, under a new index.

    An empty frame adds no rows, and pandas 2 gives it no say in the result's dtypes either (an
    empty change frame's object columns do not turn another's datetimes into objects); pandas 3
    will.  It is left out here, so the result stays what it is on both.  When every frame is empty
    they are concatenated as they are: their columns and dtypes are all the result has.
    """
    rows = [f for f in frames if len(f)]
    return pd.concat(rows or frames, ignore_index=True)
