"""The append-only tables, ``row_changes`` and ``violations``: each batch's rows exactly once.

A run appends (Delta's idempotent append, ``idempotency``); a replay re-reads changes the output
may already hold, so it inserts a row only when its key is absent (a MERGE with inserts only).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    HOUR_PATTERN,
    ROW_CHANGES,
    ROW_CHANGES_FIELDS,
    VIOLATION_INFO_DDL,
    VIOLATIONS,
    VIOLATIONS_FIELDS,
    column_names,
    table_path,
)
from reconstructor.spark.sinks.idempotency import BatchTransactions

#: A change's key in ``row_changes`` (``hour`` first: the table is partitioned by it).
_CHANGE_KEY = ("target.hour = source.hour AND target.topic = source.topic AND "
               "target.partition = source.partition AND target.offset = source.offset AND "
               "target.row_pos = source.row_pos AND target.row_id = source.row_id")
#: A recorded row's key in ``violations``: a lost partition's sessions share their record.
_VIOLATION_KEY = ("target.topic = source.topic AND target.partition = source.partition "
                  "AND target.offset = source.offset AND target.kind = source.kind "
                  "AND target.session <=> source.session")


def append_changes(txn: BatchTransactions, changes: DataFrame, schema: RowSchema, dedupe: bool) -> None:
    """The batch's change records into ``row_changes``, each under its hour."""
    cols = column_names(ROW_CHANGES_FIELDS, schema)
    out = changes.withColumn("hour", F.date_format("kafka_ts", HOUR_PATTERN)).select(*cols)
    _insert(txn, out, ROW_CHANGES, _CHANGE_KEY, dedupe)


def violation_rows(recorded: DataFrame) -> DataFrame:
    """The batch's recorded rows (``records.recorded``) as ``violations`` rows, their ``info``
    spread over the table's columns."""
    info = F.from_json("info", VIOLATION_INFO_DDL)
    return (recorded.select("topic", info.alias("v"))
            .select("topic", *[F.col(f"v.{name}").alias(name) for name in column_names(VIOLATIONS_FIELDS)
                               if name not in ("topic", "detected_at")],
                    F.current_timestamp().alias("detected_at"))
            .select(*column_names(VIOLATIONS_FIELDS)))


def new_violations(spark: SparkSession, output: str, rows: DataFrame, dedupe: bool) -> DataFrame:
    """The ``violation_rows`` that ``append_violations`` inserts: all of them, or with ``dedupe``
    those whose key the table lacks."""
    if not dedupe:
        return rows
    table = spark.read.format("delta").load(table_path(output, VIOLATIONS))
    return rows.alias("source").join(table.alias("target"), F.expr(_VIOLATION_KEY), "left_anti")


def append_violations(txn: BatchTransactions, rows: DataFrame, dedupe: bool) -> None:
    """The batch's ``violation_rows`` into ``violations``."""
    _insert(txn, rows, VIOLATIONS, _VIOLATION_KEY, dedupe)


def _insert(txn: BatchTransactions, out: DataFrame, table: str, key: str, dedupe: bool) -> None:
    """An idempotent append, or with ``dedupe`` an insert of the rows whose ``key`` is absent."""
    if dedupe:
        txn.dml(table, lambda: (txn.target(table).alias("target")
                                .merge(out.alias("source"), key)
                                .whenNotMatchedInsertAll()
                                .execute()))
        return
    txn.append(out, table)
