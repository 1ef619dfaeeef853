"""The live tables, ``current_rows`` and ``sessions``: each batch MERGEd into them, exactly once.

A MERGE is guarded by ``offset`` (``current_rows``) or by the session's point in its history
(``sessions``, ``ahead.AHEAD``), so a re-run batch writes what it wrote before, and each carries
its batch's transaction id (``idempotency``).  The two MERGEs run side by side: each is its own
Delta transaction on its own table, and much of a MERGE is driver-side planning and commit that
the other can fill.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (CURRENT_ROWS, CURRENT_ROWS_FIELDS, RESYNC_REQUESTED_AT, SESSION_FIELDS,
                                           SESSION_INFO_FIELDS, SESSIONS, SESSIONS_FIELDS, SessionField,
                                           column_names)
from reconstructor.core.state import SessionStatus
from reconstructor.spark.sinks.ahead import AHEAD
from reconstructor.spark.sinks.idempotency import BatchTransactions
from reconstructor.spark.sinks.records import SESSION_INFO
from reconstructor.spark.sinks.timings import timed
from reconstructor.spark.transactions import side_by_side


def merge_live_tables(spark: SparkSession, txn: BatchTransactions, schema: RowSchema, current: DataFrame,
                      sessions: DataFrame, closed: bool) -> dict[str, float]:
    """Both MERGEs side by side (``closed``: some session of the batch closed); each one's seconds."""
    return dict(zip((CURRENT_ROWS, SESSIONS), side_by_side(
        spark,
        timed(lambda: _write_current_rows(txn, schema, current, sessions, closed)),
        timed(lambda: _write_sessions(txn, sessions)),
    )))


def _write_current_rows(txn: BatchTransactions, schema: RowSchema, current: DataFrame, sessions: DataFrame,
                        closed: bool) -> None:
    with txn.dml(CURRENT_ROWS):
        _merge_current_rows(txn, schema, current)
    if closed:  # after the MERGE, so a closing session's last changes land before it leaves
        with txn.dml(CURRENT_ROWS, step="-closed"):
            _delete_closed_sessions(txn, sessions)


def _write_sessions(txn: BatchTransactions, sessions: DataFrame) -> None:
    with txn.dml(SESSIONS):
        _merge_sessions(txn, sessions)


def _merge_current_rows(txn: BatchTransactions, schema: RowSchema, current: DataFrame) -> None:
    # The last change of each touched row in this batch; older batches are fenced off by the
    # offset (a session lives in one partition).
    cols = column_names(CURRENT_ROWS_FIELDS, schema)
    source = current.withColumn("updated_at", F.col("event_ts")).select(*cols, "op")
    assign = {c: f"source.`{c}`" for c in cols}
    (txn.target(CURRENT_ROWS).alias("target").merge(
        source.alias("source"),
        "target.topic = source.topic AND target.session = source.session AND target.row_id = source.row_id")
     .whenMatchedDelete(condition="source.op = 'delete' AND source.offset >= target.offset")
     .whenMatchedUpdate(condition="source.offset >= target.offset", set=assign)
     .whenNotMatchedInsert(condition="source.op <> 'delete'", values=assign)
     .execute())


def _delete_closed_sessions(txn: BatchTransactions, sessions: DataFrame) -> None:
    """A session that ended, timed out or was quarantined leaves the live table."""
    closed = (sessions.filter(F.col(f"{SESSION_INFO}.status") != SessionStatus.OPEN.value)
              .select("topic", "session", "offset"))
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


def _merge_sessions(txn: BatchTransactions, sessions: DataFrame) -> None:
    source = sessions.select(
        "topic", "session", *[_session_column(f) for f in SESSION_FIELDS],
        F.current_timestamp().alias("updated_at"), F.col(f"{SESSION_INFO}.chain_head").alias("chain_head"),
        F.col(f"{SESSION_INFO}.chain_seal").alias("chain_seal"),
        F.lit(None).cast("timestamp").alias(RESYNC_REQUESTED_AT),
    )
    # The last request's time is the resync requests' own (``resync``): a session record keeps it.
    assign = {c: f"source.`{c}`" for c in column_names(SESSIONS_FIELDS) if c != RESYNC_REQUESTED_AT}
    (txn.target(SESSIONS).alias("target")
     .merge(source.alias("source"), "target.topic = source.topic AND target.session = source.session")
     .whenMatchedUpdate(condition=AHEAD, set=assign)
     .whenNotMatchedInsertAll()
     .execute())
