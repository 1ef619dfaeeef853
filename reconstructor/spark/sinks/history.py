"""How far a writer got: the Kafka offsets its commits recorded in a table's history, and those a
checkpoint's last committed batch ended at.  The writer claim and ``ahead`` compare the two."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.writer import newest_first, offsets_in_metadata
from reconstructor.core.data_loss import offsets_from_log
from reconstructor.spark.checkpoint import read_checkpoint_file

# How many of a table's latest commits a takeover searches for its writer's last batch (a replay,
# compactions and a second table write of a batch commit in between).
HISTORY_SEARCHED = 200


def recorded_offsets(spark: SparkSession, path: str, writer: str | None) -> Iterator[dict]:
    """The offsets that ``writer``'s (any writer's, for None) commits among the table's recent
    ones record, newest first (``batch_metadata``)."""
    if not DeltaTable.isDeltaTable(spark, path):
        return
    for r in DeltaTable.forPath(spark, path).history(HISTORY_SEARCHED).select("userMetadata").collect():
        found = offsets_in_metadata(r.userMetadata, writer)
        if found is not None:
            yield found


def commit_history(table: DeltaTable) -> Callable[[int | None], list]:
    """``table``'s ``history(limit)`` as rows of (version, millis: the commit's time in epoch
    milliseconds, userMetadata), newest first (None: the whole log), for
    ``contract.writer.newest_first``."""
    return lambda limit: (table.history(limit) if limit else table.history()).selectExpr(
        "version", "unix_millis(timestamp) AS millis", "userMetadata").collect()


def writer_offsets(spark: SparkSession, path: str, writer: str) -> dict | None:
    """The offsets of ``writer``'s newest commit to the table, searched back through the whole
    history its log keeps, however many commits came after it; {} when the log is whole and none
    of its commits records them (the writer never wrote the table, or wrote it as an earlier
    version); None when the log no longer reaches back to the table's first commit, so the
    writer's may have been cleaned from it (``delta.logRetentionDuration``)."""
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    oldest = 0
    for r in newest_first(commit_history(DeltaTable.forPath(spark, path)), HISTORY_SEARCHED):
        found = offsets_in_metadata(r.userMetadata, writer)
        if found is not None:
            return found
        oldest = r.version
    return None if oldest > 0 else {}


def committed_offsets(spark: SparkSession, checkpoint) -> dict:
    """The Kafka offsets the checkpoint's last committed batch ended at ({} before any)."""
    if checkpoint.last_committed is None:
        return {}
    text = read_checkpoint_file(spark, checkpoint.location, f"offsets/{checkpoint.last_committed}")
    return offsets_from_log(text) if text else {}
