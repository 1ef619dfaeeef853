"""What the four Delta tables would hold after each micro-batch, built without Spark or Delta.

The Spark sinks (``reconstructor.spark.sinks``) write the stateful step's output records into
``row_changes`` (an append), ``current_rows`` (a MERGE by row, fenced by offset, then the rows of
sessions that closed leave), ``sessions`` (a MERGE by session, kept where the table is ahead:
``spark.sinks.ahead.AHEAD``) and ``violations`` (an append).  These are the same rules over
Python rows, for the test driver; a differential test holds them to a real run's tables.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pandas as pd
import pyarrow as pa

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    CURRENT_ROWS,
    CURRENT_ROWS_FIELDS,
    RESYNC_REQUESTED_AT,
    ROW_CHANGES,
    ROW_CHANGES_FIELDS,
    ROW_VALUES,
    SESSION_INFO_FIELDS,
    SESSIONS,
    SESSIONS_FIELDS,
    VIOLATIONS,
    VIOLATIONS_FIELDS,
    RecordKind,
    hour_of,
)
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.timestamps import from_epoch_micros
from reconstructor.core.violations import ViolationRecord
from reconstructor.spark.sinks.ahead import history_point

_ARROW = {"STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_(),
          "DOUBLE": pa.float64(), "TIMESTAMP": pa.timestamp("us", tz="UTC")}


def arrow_schema(fields: Any, schema: RowSchema) -> pa.Schema:
    """A table's Arrow schema from its field list (``contract.tables``): times in UTC microseconds,
    as Delta holds them; ``NOT NULL`` columns not nullable."""
    out: list[pa.Field] = []
    for field in fields:
        if field is ROW_VALUES:
            out += [pa.field(c.name, c.arrow_type) for c in schema.columns]
            continue
        name, ddl = field
        out.append(pa.field(name, _ARROW[ddl.split()[0]], nullable="NOT NULL" not in ddl))
    return pa.schema(out)


class DriverTables:
    """The four tables' rows, as a run's sinks would leave them."""

    def __init__(self, schema: RowSchema):
        self.schema = schema
        self._changes: list[dict[str, Any]] = []
        self._current: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._sessions: dict[tuple[str, str], dict[str, Any]] = {}
        self._violations: list[dict[str, Any]] = []

    def write(self, records: list[dict[str, Any]], now: dt.datetime) -> None:
        """One micro-batch's output records (``contract.tables.RECORD_FIELDS``, as dicts) into the
        tables, as the sinks write them: ``now`` is the batch's ``current_timestamp()``."""
        kinds = [r["record"] for r in records]
        changes = [r for r, k in zip(records, kinds) if k == RecordKind.CHANGE.value]
        current = [r for r, k in zip(records, kinds)
                   if (k == RecordKind.CHANGE.value and r["is_latest"]) or k == RecordKind.CURRENT.value]
        sessions = [(r, json.loads(r["info"])) for r, k in zip(records, kinds) if k == RecordKind.SESSION.value]
        for r in changes:
            self._changes.append({**r, "hour": hour_of(r["kafka_ts"])})
        for r in current:
            self._merge_row(r)
        for r, info in sessions:
            if info["status"] != SessionStatus.OPEN.value:
                self._close(r["topic"], r["session"], r["offset"])
        for r, info in sessions:
            self._merge_session(r, info, now)
        for r, k in zip(records, kinds):
            if k == RecordKind.RECORDED.value:
                v = ViolationRecord.from_json(r["info"])
                self._violations.append({**{name: getattr(v, name) for name in (
                    "partition", "offset", "session", "expected_seq", "found_seq", "detail", "value")},
                    "topic": r["topic"], "kind": v.kind.value, "detected_at": now})

    def _merge_row(self, r: dict[str, Any]) -> None:
        key = (r["topic"], r["session"], r["row_id"])
        held = self._current.get(key)
        if held is not None and r["offset"] < held["offset"]:
            return  # an older batch's change: fenced off by the offset
        if r["op"] == "delete":
            self._current.pop(key, None)
        else:
            self._current[key] = {**r, "updated_at": r["event_ts"]}

    def _close(self, topic: str, session: str, offset: int | None) -> None:
        """A session that ended, timed out or was quarantined leaves ``current_rows``."""
        for key in [k for k, row in self._current.items() if k[:2] == (topic, session)]:
            if offset is not None and self._current[key]["offset"] <= offset:
                del self._current[key]

    def _merge_session(self, r: dict[str, Any], info: dict[str, Any], now: dt.datetime) -> None:
        key = (r["topic"], r["session"])
        row: dict[str, Any] = {"topic": r["topic"], "session": r["session"], "partition": r["partition"]}
        for f in SESSION_INFO_FIELDS:
            value = info[f.name]
            row[f.column] = (None if value is None else from_epoch_micros(value)) if f.is_time else value
        row.update(updated_at=now, chain_head=info.get("chain_head"), chain_seal=info.get("chain_seal"))
        held = self._sessions.get(key)
        if held is None:
            self._sessions[key] = {**row, RESYNC_REQUESTED_AT: None}
        elif (history_point(row["last_offset"], row["status"])
              >= history_point(held["last_offset"], held["status"])):
            self._sessions[key] = {**row, RESYNC_REQUESTED_AT: held[RESYNC_REQUESTED_AT]}

    def arrow(self) -> dict[str, pa.Table]:
        """Each table as Arrow: ``row_changes`` and ``violations`` in the order they were written,
        ``current_rows`` and ``sessions`` sorted by their keys."""
        current = [self._current[k] for k in sorted(self._current)]
        sessions = [self._sessions[k] for k in sorted(self._sessions)]
        return {ROW_CHANGES: self._table(self._changes, ROW_CHANGES_FIELDS),
                CURRENT_ROWS: self._table(current, CURRENT_ROWS_FIELDS),
                SESSIONS: self._table(sessions, SESSIONS_FIELDS),
                VIOLATIONS: self._table(self._violations, VIOLATIONS_FIELDS)}

    def _table(self, rows: list[dict[str, Any]], fields: Any) -> pa.Table:
        schema = arrow_schema(fields, self.schema)
        return pa.Table.from_pylist([{f.name: _plain(row.get(f.name)) for f in schema} for row in rows], schema)


def _plain(value: Any) -> Any:
    """A value of a pandas row as Arrow takes it: a time as an aware UTC datetime, a missing value
    as None."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return (value.tz_localize("UTC") if value.tzinfo is None else value).to_pydatetime()
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value.item() if hasattr(value, "item") else value
