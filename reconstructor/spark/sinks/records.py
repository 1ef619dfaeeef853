"""The stateful step's output records, told apart by kind: which of them each table takes."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from reconstructor.contract.tables import SESSION_INFO_DDL, RecordKind

# A session record's ``info``, parsed: a struct column of the session's fields.
SESSION_INFO = "session_info"


def is_record(kind: RecordKind) -> Column:
    """The output record is of ``kind``."""
    return F.col("record") == kind.value


def changes(batch: DataFrame) -> DataFrame:
    """The change records, each one a ``row_changes`` row."""
    return batch.filter(is_record(RecordKind.CHANGE))


def current(batch: DataFrame) -> DataFrame:
    """What ``current_rows`` is MERGEd with: each row's latest change in the batch, and the rows a
    replay re-states as current."""
    return batch.filter((is_record(RecordKind.CHANGE) & F.col("is_latest")) | is_record(RecordKind.CURRENT))


def sessions(batch: DataFrame) -> DataFrame:
    """The session records, their ``info`` parsed into ``SESSION_INFO`` (both MERGEs read it)."""
    return (batch.filter(is_record(RecordKind.SESSION))
            .withColumn(SESSION_INFO, F.from_json("info", SESSION_INFO_DDL)))


def recorded(spark, batch: DataFrame, losses: list) -> DataFrame:
    """The rows ``violations`` takes: the batch's recorded ones, and each lost partition's own row
    beside its sessions' rows."""
    rows = batch.filter(is_record(RecordKind.RECORDED)).select("topic", "info")
    if losses:
        rows = rows.unionByName(spark.createDataFrame(
            [(d.topic, d.violation().to_json()) for d in losses], "topic STRING, info STRING"))
    return rows
