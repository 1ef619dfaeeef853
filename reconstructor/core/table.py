"""The session table's operations: snapshots and row changes applied to it, vectorised.

A session table is pandas indexed by ``row_id`` (or Arrow, ``row_id`` first, as read from the
state blob).  The applied row changes come out as columns (``CHANGE`` and the row columns, in
apply order); a change the table refuses raises ``Rejected``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Self, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.blob import arrow_rows, row_ids
from reconstructor.core.drift import snapshot_drift
from reconstructor.core.frames import (
    CHANGE,
    INT_COLUMNS,
    coerce_columns,
    coerce_times,
    int_or_none,
    take,
    take_values,
    values_of,
)
from reconstructor.core.policy import OnDrift
from reconstructor.core.state import SessionState
from reconstructor.core.violations import ViolationKind, ViolationRecord, quoted
from reconstructor.errors import Rejected


@dataclass(frozen=True)
class RecordFinding:
    """What the session table found wrong with one record, at the record's coordinates."""

    kind: ViolationKind
    partition: int | None
    offset: int | None
    seq: int | None
    detail: str

    @classmethod
    def at(cls, kind: ViolationKind, record: Any, detail: str) -> Self:
        """The finding about ``record`` (a message or change row, or its values by column name)."""
        return cls(kind, int_or_none(record["partition"]), int_or_none(record["offset"]),
                   int_or_none(record["seq"]), detail)

    def violation(self, topic: str, session: str | None) -> ViolationRecord:
        return ViolationRecord(self.kind, topic, self.partition, self.offset, session,
                               self.seq, self.seq, self.detail)


class Drift(RecordFinding):
    """A snapshot that differs from the table rebuilt from the updates: recorded in ``violations``
    (``SNAPSHOT_DRIFT``), never raised; the snapshot is applied all the same."""


def apply_messages(msgs: pd.DataFrame, rows: pd.DataFrame, table: pd.DataFrame, schema: RowSchema, *,
                   known: bool = False, on_drift: OnDrift = OnDrift.IGNORE,
                   ) -> tuple[pd.DataFrame, pd.DataFrame, list[Drift]]:
    """Apply ordered, continuous messages (``msgs``, one row each; ``rows``, their rows) to
    ``table``; return (changes, table, drifts).  Raises ``Rejected`` for a flawed snapshot or a
    delete of an unknown row.

    A snapshot that replaces a table built from a snapshot (``known`` for the table given, always
    for one an earlier snapshot of ``msgs`` built) is audited unless ``on_drift`` ignores it: its
    difference is a ``SNAPSHOT_DRIFT``, raised with ``OnDrift.FAIL``, else returned in ``drifts``.
    """
    names = schema.names
    drifts: list[Drift] = []
    rows = rows[rows["row_pos"].notna()]
    rows = coerce_times(coerce_columns(rows, schema))
    rows = rows.sort_values(["seq", "row_pos"], kind="stable")
    segment_of_seq = pd.Series(msgs["type"].eq("snapshot").cumsum().to_numpy(), index=msgs["seq"].to_numpy())
    row_segment = rows["seq"].map(segment_of_seq).to_numpy()
    pieces = []
    for seg in np.unique(segment_of_seq.to_numpy()):
        seg_msgs = msgs[segment_of_seq.to_numpy() == seg]
        seg_rows = rows[row_segment == seg]
        head = seg_msgs.iloc[0]
        if head["type"] == "snapshot":
            snap_rows = seg_rows[seg_rows["seq"] == head["seq"]]
            problem = snapshot_problem(snap_rows)
            if problem is not None:
                raise Rejected(RecordFinding.at(ViolationKind.MALFORMED, head, problem))
            if known and on_drift != OnDrift.IGNORE:
                drift = snapshot_drift(table, snap_rows, names)
                if drift is not None:
                    if on_drift == OnDrift.FAIL:  # the drift is then the query's violation
                        raise Rejected(RecordFinding.at(ViolationKind.SNAPSHOT_DRIFT, head, drift))
                    drifts.append(Drift.at(ViolationKind.SNAPSHOT_DRIFT, head, drift))
            known = True
            new_ids = pd.Index(snap_rows["row_id"])
            dropped = table.index.difference(new_ids).sort_values()
            if len(dropped):
                gone = pd.DataFrame({"row_id": np.asarray(dropped, dtype=object)})
                gone = _stamp(gone, head, "delete")
                gone["row_pos"] = -1
                for col in names:
                    gone[col] = pd.Series([None] * len(gone), dtype=table[col].dtype)
                pieces.append(gone)
            pieces.append(snap_rows)
            table = snap_rows.set_index("row_id")[names]
            seg_rows = seg_rows[seg_rows["seq"] != head["seq"]]
        if len(seg_rows):
            table = apply_updates(seg_rows, table, names)
            pieces.append(seg_rows)
    if not pieces:
        return empty_changes(schema), table, drifts
    changes = pd.concat([p[list(CHANGE) + names] for p in pieces], ignore_index=True)
    return _int_columns(coerce_columns(changes, schema)), table, drifts


def apply_updates(ops: Any, table: pd.DataFrame | pa.Table, names: list[str]) -> pd.DataFrame | pa.Table:
    """Upserts and deletes of one run of update messages, in (seq, row_pos) order, vectorised.

    ``ops`` is a change frame or its columns (``BatchResult.columns``).  A delete is valid when
    the row exists just before it: the previous op on that row in the run is an upsert, or there
    is none and the row is in the table; else ``Rejected``.  ``table`` is pandas or Arrow (a state
    read from its blob), and the new table is the same kind.
    """
    if isinstance(ops, pd.DataFrame):
        ops = columns_of(ops)
    id_values, op_values = ops["row_id"], ops["op"]
    ids, table_ids = pd.Index(id_values), row_ids(table)
    is_delete = op_values == "delete"
    if is_delete.any():
        prev_op = pd.Series(op_values).groupby(id_values, sort=False).shift()
        existed = prev_op.eq("upsert").to_numpy() | (prev_op.isna().to_numpy() & ids.isin(table_ids))
        unknown = np.flatnonzero(is_delete & ~existed)
        if unknown.size:
            bad = {name: values[int(unknown[0])] for name, values in ops.items()}
            raise Rejected(RecordFinding.at(ViolationKind.UNKNOWN_ROW, bad,
                                            f"delete of row {quoted(bad['row_id'])}, which is not in the "
                                            "session's table"))
    # Positions, and the new table built once from its columns: a frame-level filter, column pick
    # and concat cost a copy each.
    final = np.flatnonzero(~ids.duplicated(keep="last"))
    up = final[~is_delete[final]]
    kept = np.flatnonzero(~pd.Index(table_ids).isin(id_values[final]))
    if len(kept) == len(table) and not len(up):
        return table
    if isinstance(table, pa.Table):
        added = arrow_rows(id_values[up], {name: take(ops[name], up) for name in names}, table.schema)
        return pa.concat_tables([table.take(kept), added]).combine_chunks()
    index = pd.Index(np.concatenate([table_ids[kept], id_values[up]]), dtype=object, name="row_id")
    return pd.DataFrame({name: _stack(take_values(table[name], kept), take(ops[name], up)) for name in names},
                        index=index, copy=False)


def snapshot_problem(snap_rows: pd.DataFrame) -> str | None:
    """Why a snapshot's rows cannot be a table (a delete, a row twice), or None."""
    if snap_rows["op"].eq("delete").any():
        rid = snap_rows.loc[snap_rows["op"].eq("delete"), "row_id"].iloc[0]
        return f"a snapshot carries whole rows, not deletes (row {quoted(rid)})"
    dup = snap_rows["row_id"].duplicated()
    if dup.any():
        return f"row {quoted(snap_rows.loc[dup, 'row_id'].iloc[0])} appears twice in one snapshot"
    return None


@functools.lru_cache(maxsize=8)
def empty_table(schema: RowSchema) -> pd.DataFrame:
    """A new session's table, built once per schema (building it costs more than copying it):
    copy it before changing it."""
    return cast(pd.DataFrame, schema.empty_frame())


def columns_of(frame: pd.DataFrame) -> dict[str, Any]:
    """A change frame as ``BatchResult.columns``."""
    return {name: values_of(frame[name]) for name in frame.columns}


def empty_changes(schema: RowSchema) -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in CHANGE})
    for col in schema.columns:
        frame[col.name] = pd.Series(dtype=object)
    frame = coerce_columns(frame, schema)
    return frame.astype({"partition": "int64", "offset": "int64", "seq": "int64", "row_pos": "int64"})


def rows_back(columns: dict[str, Any], state: SessionState, resumed_from: SessionState,
              schema: RowSchema) -> dict[str, Any]:
    """``columns`` (a batch's changes) and, after them, the session table's rows that the batch did
    not change, as upserts: a timed-out session that resumes gets every row back in
    ``current_rows``.  Those rows carry the session's last record before its timeout (its seq,
    offset and time); their values are the table's own."""
    table = state.table
    kept = table[~table.index.isin(pd.Index(columns["row_id"]))]
    back = pd.DataFrame({name: kept[name].to_numpy() for name in schema.names})
    back["row_id"] = np.asarray(kept.index, dtype=object)
    back = back.assign(partition=resumed_from.partition, offset=resumed_from.last_offset,
                       seq=resumed_from.last_seq, type="update", row_pos=-1, op="upsert",
                       event_ts=resumed_from.last_event_ts,
                       kafka_ts=pd.NaT)  # type: ignore[arg-type]  # pandas-stubs leave NaT out of assign's scalars
    changed, back = pd.DataFrame(columns, copy=False), back[list(CHANGE) + schema.names]
    # A batch that changed no row has no change rows: pandas would take a dtype from that empty
    # frame's columns (and warns that it will), so the rows brought back stand alone.
    frame = pd.concat([changed, back], ignore_index=True) if len(changed) else back.reset_index(drop=True)
    return columns_of(_int_columns(coerce_times(coerce_columns(frame, schema))))


def last_change_per_row(row_ids: Any) -> np.ndarray:
    """True on each row's last change, given the ``row_id`` of changes in apply order, ``(seq, row_pos)``.

    Those are what ``current_rows`` needs from a batch: the group knows them already, so the sink
    does not have to shuffle and aggregate the whole change log to find them.
    """
    return cast("np.ndarray[Any, Any]", ~pd.Index(row_ids).duplicated(keep="last"))


def _int_columns(changes: pd.DataFrame) -> pd.DataFrame:
    """The change frame's integer columns as int64; astype copies every column of the frame, even
    for a no-op, so only what needs it is cast."""
    ints = {c: "int64" for c in INT_COLUMNS if changes[c].dtype != "int64"}
    return changes.astype(ints) if ints else changes


def _stack(a: Any, b: Any) -> Any:
    """Two value arrays as one, in the dtype ``pd.concat`` would give."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.concatenate([a, b])
    if a.dtype == b.dtype:
        return type(a)._concat_same_type([a, b])
    return pd.concat([pd.Series(a), pd.Series(b)], ignore_index=True).array


def _stamp(frame: pd.DataFrame, msg: pd.Series, op: str) -> pd.DataFrame:
    for col in ("partition", "offset", "seq", "type", "event_ts", "kafka_ts"):
        frame[col] = msg[col]
    frame["op"] = op
    return frame
