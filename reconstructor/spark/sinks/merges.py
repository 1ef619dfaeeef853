"""The live tables, ``current_rows`` and ``sessions``: each batch MERGEd into them, exactly once.

A MERGE is guarded by ``offset`` (``current_rows``) or by the session's point in its history
(``sessions``, ``ahead.AHEAD``), so a re-run batch writes what it wrote before, and a re-run
skips those its earlier attempt committed (``idempotency``).  The two MERGEs run side by side: each is its own
Delta transaction on its own table, and much of a MERGE is driver-side planning and commit that
the other can fill.

Into a table that holds no row yet (an output's first batch) a MERGE matches nothing: what it
writes is its inserts, so the batch appends them instead, as the same write of the batch, and
spares the first batch the planning of three MERGEs in a cold driver.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    CURRENT_ROWS,
    CURRENT_ROWS_FIELDS,
    RESYNC_REQUESTED_AT,
    SESSION_FIELDS,
    SESSION_INFO_FIELDS,
    SESSIONS,
    SESSIONS_FIELDS,
    SessionField,
    column_names,
)
from reconstructor.contract.writer import TableState
from reconstructor.core.session_status import SessionStatus
from reconstructor.spark.sinks.ahead import AHEAD
from reconstructor.spark.sinks.idempotency import BatchTransactions
from reconstructor.spark.sinks.records import SESSION_INFO
from reconstructor.spark.sinks.timings import timed
from reconstructor.spark.transactions import side_by_side


def merge_live_tables(spark: SparkSession, txn: BatchTransactions, schema: RowSchema, current: DataFrame,
                      sessions: DataFrame, closed: bool, empty: frozenset[str] = frozenset()) -> dict[str, float]:
    """Both MERGEs side by side (``closed``: some session of the batch closed; ``empty``: the live
    tables known to hold no row, which get appends); each one's seconds."""
    return dict(zip((CURRENT_ROWS, SESSIONS), side_by_side(
        spark,
        timed(lambda: _write_current_rows(txn, schema, current, sessions, closed, CURRENT_ROWS in empty)),
        timed(lambda: _write_sessions(txn, sessions, SESSIONS in empty)),
    )))


def empty_live_tables(states: Sequence[TableState]) -> frozenset[str]:
    """The live tables that hold no row, from the tables' states as the writer check read them: a
    table absent then (this run creates it) or one read as empty.  A table whose data was not read
    (``has_data`` None) may hold rows."""
    known = {state.name: state for state in states}
    return frozenset(name for name in (CURRENT_ROWS, SESSIONS)
                     if name not in known or known[name].has_data is False)


def _write_current_rows(txn: BatchTransactions, schema: RowSchema, current: DataFrame, sessions: DataFrame,
                        closed: bool, empty: bool) -> None:
    if empty:
        txn.append(_first_current_rows(schema, current, sessions if closed else None), CURRENT_ROWS)
        return
    txn.dml(CURRENT_ROWS, lambda: _merge_current_rows(txn, schema, current))
    if closed:  # after the MERGE, so a closing session's last changes land before it leaves
        txn.dml(CURRENT_ROWS, lambda: _delete_closed_sessions(txn, sessions), step="-closed")


def _write_sessions(txn: BatchTransactions, sessions: DataFrame, empty: bool) -> None:
    if empty:  # the MERGE's inserts: every row of the source
        txn.append(_sessions_source(sessions).select(*column_names(SESSIONS_FIELDS)), SESSIONS)
        return
    txn.dml(SESSIONS, lambda: _merge_sessions(txn, sessions))


def _current_rows_source(schema: RowSchema, current: DataFrame) -> DataFrame:
    return current.withColumn("updated_at", F.col("event_ts")).select(*column_names(CURRENT_ROWS_FIELDS, schema),
                                                                       "op")


def _first_current_rows(schema: RowSchema, current: DataFrame, sessions: DataFrame | None) -> DataFrame:
    """What the ``current_rows`` MERGE and the closed sessions' delete leave in a table that held no
    row: the rows it inserts (all but deletes), less those the delete then removes (a row of a
    session that closed in the batch, at or before the close's offset)."""
    rows = _current_rows_source(schema, current).filter("op <> 'delete'")
    if sessions is not None:
        closed = _closed_sessions(sessions).alias("closed")
        rows = rows.alias("row").join(
            closed, (F.col("row.topic") == F.col("closed.topic")) & (F.col("row.session") == F.col("closed.session"))
            & (F.col("row.offset") <= F.col("closed.offset")), "left_anti")
    return rows.select(*column_names(CURRENT_ROWS_FIELDS, schema))


def _merge_current_rows(txn: BatchTransactions, schema: RowSchema, current: DataFrame) -> None:
    # The last change of each touched row in this batch; older batches are fenced off by the
    # offset (a session lives in one partition).
    cols = column_names(CURRENT_ROWS_FIELDS, schema)
    source = _current_rows_source(schema, current)
    assign: dict[str, str | Column] = {c: f"source.`{c}`" for c in cols}
    (txn.target(CURRENT_ROWS).alias("target").merge(
        source.alias("source"),
        "target.topic = source.topic AND target.session = source.session AND target.row_id = source.row_id")
     .whenMatchedDelete(condition="source.op = 'delete' AND source.offset >= target.offset")
     .whenMatchedUpdate(condition="source.offset >= target.offset", set=assign)
     .whenNotMatchedInsert(condition="source.op <> 'delete'", values=assign)
     .execute())


def _closed_sessions(sessions: DataFrame) -> DataFrame:
    """The batch's sessions that ended, timed out or were quarantined: their key and offset."""
    return (sessions.filter(F.col(f"{SESSION_INFO}.status") != SessionStatus.OPEN.value)
            .select("topic", "session", "offset"))


def _delete_closed_sessions(txn: BatchTransactions, sessions: DataFrame) -> None:
    """A session that ended, timed out or was quarantined leaves the live table."""
    closed = _closed_sessions(sessions)
    (txn.target(CURRENT_ROWS).alias("target")
     .merge(closed.alias("source"), "target.topic = source.topic AND target.session = source.session")
     .whenMatchedDelete(condition="target.offset <= source.offset")
     .execute())


def _session_column(field: SessionField) -> Column:
    """A ``sessions`` column from a session record: its partition column, else its info's field (a
    time from epoch microseconds)."""
    if field not in SESSION_INFO_FIELDS:
        return F.col(field.name).alias(field.column)
    value = F.col(f"{SESSION_INFO}.{field.name}")
    return (F.timestamp_micros(value) if field.is_time else value).alias(field.column)


def _sessions_source(sessions: DataFrame) -> DataFrame:
    return sessions.select(
        "topic", "session", *[_session_column(f) for f in SESSION_FIELDS],
        F.current_timestamp().alias("updated_at"), F.col(f"{SESSION_INFO}.chain_head").alias("chain_head"),
        F.col(f"{SESSION_INFO}.chain_seal").alias("chain_seal"),
        F.lit(None).cast("timestamp").alias(RESYNC_REQUESTED_AT),
    )


def _merge_sessions(txn: BatchTransactions, sessions: DataFrame) -> None:
    source = _sessions_source(sessions)
    # The last request's time is the resync requests' own (``resync``): a session record keeps it.
    assign: dict[str, str | Column] = {c: f"source.`{c}`" for c in column_names(SESSIONS_FIELDS)
                                       if c != RESYNC_REQUESTED_AT}
    (txn.target(SESSIONS).alias("target")
     .merge(source.alias("source"), "target.topic = source.topic AND target.session = source.session")
     .whenMatchedUpdate(condition=AHEAD, set=assign)
     .whenNotMatchedInsertAll()
     .execute())
