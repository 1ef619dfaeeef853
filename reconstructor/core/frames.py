"""Column names of the core's input and output frames, and one canonical dtype per column type.

The Spark layer hands the core flat pandas frames (one row per message row, see ``INPUT``), and
takes back flat frames of row changes (``CHANGE``).  Canonical dtypes keep frames from different
sources (Arrow from Spark, the state blob, tests) concatenable without object-dtype drift.
"""

from __future__ import annotations

import pandas as pd

from reconstructor.schema import RowSchema

# One row per row of a message; a message without rows (an `end`, an empty snapshot) has one row
# with a null row_pos.  `error` is the parse failure of the record, null when it parsed.
INPUT = ("partition", "offset", "kafka_ts", "key", "session", "seq", "type", "event_ts",
         "row_pos", "row_id", "op", "error")

# One row per applied row change.
# `row_pos` orders two changes of one row inside one message (-1: a row a snapshot dropped).
CHANGE = ("partition", "offset", "seq", "type", "row_pos", "row_id", "op", "event_ts", "kafka_ts")

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

    A column already in its canonical dtype is left alone: this runs for every session of every
    micro-batch, and pandas' no-op casts still copy.
    """
    out = {}
    for col in schema.columns:
        s = frame[col.name]
        if col.type == "double":
            if s.dtype != "float64":
                out[col.name] = s.astype("float64")
        elif col.type == "long":
            if s.dtype != "Int64":
                out[col.name] = s.astype("Int64")
        elif col.type == "boolean":
            if s.dtype != "boolean":
                out[col.name] = s.astype("boolean")
        elif col.type == "timestamp":
            if not _is_naive_datetime(s.dtype):
                out[col.name] = _to_naive_utc(s)
        elif s.dtype != object or (s.hasnans and any(v is not None for v in s[s.isna()])):
            out[col.name] = s.astype(object).where(s.notna(), None)
    return frame.assign(**out) if out else frame


def coerce_times(frame: pd.DataFrame, names: tuple[str, ...] = ("kafka_ts", "event_ts")) -> pd.DataFrame:
    out = {n: _to_naive_utc(frame[n]) for n in names
           if n in frame.columns and not _is_naive_datetime(frame[n].dtype)}
    return frame.assign(**out) if out else frame  # assign copies the frame even for a no-op
