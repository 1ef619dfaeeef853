"""Read one session's state from a streaming checkpoint with Spark's state data source.

``format("statestore")`` reads the RocksDB state of the last committed batch without running the
query; the Arrow blob in it is decoded by the same core function the state function uses.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reconstructor.schema import RowSchema
from reconstructor.spark.stateful import state_from_tuple

STATE_FIELDS = ("partition", "status", "first_seq", "last_seq", "last_offset", "snapshot_seq",
                "snapshot_offset", "started_us", "last_event_us", "row_count", "table")


def read_session_state(spark: SparkSession, checkpoint: str, topic: str, session: str,
                       schema: RowSchema) -> tuple[dict, pd.DataFrame] | None:
    """(scalar fields, table) of one session, or None when the checkpoint holds no such session."""
    # RocksDB's loader reports to the driver's StateStoreCoordinator, which Spark registers only
    # once the session's StreamingQueryManager exists; touch it so a batch job can read state.
    spark.streams.active  # noqa: B018
    states = spark.read.format("statestore").load(checkpoint)
    rows = (states.where((F.col("key.topic") == topic) & (F.col("key.group_session") == session))
            .select(*[F.col(f"value.groupState.{f}").alias(f) for f in STATE_FIELDS])
            .collect())
    if not rows:
        return None
    state = state_from_tuple(tuple(rows[0]), schema)
    info = {
        "topic": topic, "session": session, "partition": state.partition, "status": state.status.value,
        "first_seq": state.first_seq, "last_seq": state.last_seq, "last_offset": state.last_offset,
        "snapshot_seq": state.snapshot_seq, "snapshot_offset": state.snapshot_offset,
        "row_count": state.row_count,
    }
    return info, state.table.sort_index()
