"""Column names of the core's input and output frames, and one canonical dtype per column type.

The Spark layer hands the core flat pandas frames (one row per message row, see ``INPUT``), and
takes back flat frames of row changes (``CHANGE``).  Canonical dtypes keep frames from different
sources (Arrow from Spark, the state blob, tests) concatenable without object-dtype drift.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reconstructor.schema import RowSchema

# One row per row of a message; a message without rows (an `end`, an empty snapshot) has one row
# with a null row_pos.  `error` is the parse failure of the record, null when it parsed.
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

MESSAGE_TYPES = ("snapshot", "update", "end")
OPS = ("upsert", "delete")


def _is_naive_datetime(dtype) -> bool:
    return pd.api.types.is_datetime64_dtype(dtype) and not isinstance(dtype, pd.DatetimeTZDtype)


def _to_naive_utc(series: pd.Series) -> pd.Series:
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert("UTC").dt.tz_localize(None)
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
    return s.astype(object).where(s.notna(), None)  # strings, with None (not NaN) for a null


def coerce_times(frame: pd.DataFrame, names: tuple[str, ...] = TIME_COLUMNS) -> pd.DataFrame:
    out = {n: _to_naive_utc(frame[n]) for n in names
           if n in frame.columns and not _is_naive_datetime(frame[n].dtype)}
    return frame.assign(**out) if out else frame  # assign copies the frame even for a no-op


def change_rows(frame, order, schema: RowSchema) -> dict:
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


def take_values(s: pd.Series, order):
    """``s``'s values at positions ``order``: a numpy array, or an extension array (Int64, boolean)."""
    return take(values_of(s), order)


def take(values, order):
    """``values`` (a numpy or extension array) at positions ``order``."""
    return values[order] if isinstance(values, np.ndarray) else values.take(order)


def values_of(s: pd.Series):
    """``s``'s values without a copy: a numpy array, or an extension array (Int64, boolean)."""
    return s.array if isinstance(s.dtype, pd.api.extensions.ExtensionDtype) else s.to_numpy()
