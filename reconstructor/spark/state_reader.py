"""Read one session's state from a streaming checkpoint with Spark's state data source.

``format("statestore")`` reads the RocksDB state of the last committed batch without running the
query.  Either engine's: the Python engine's ``applyInPandasWithState`` keeps the state fields
under ``value.groupState`` with the table as an Arrow blob (decoded by the same core function the
state function uses), the JVM engine's ``flatMapGroupsWithState`` keeps them under ``value`` with
its own blob (``core.jvm_blob``).
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import SESSION_FIELDS, STATE_FIELDS
from reconstructor.core import jvm_blob
from reconstructor.core.blob import read_table
from reconstructor.spark.stateful import state_from_tuple


def read_session_state(spark: SparkSession, checkpoint: str, topic: str, session: str,
                       schema: RowSchema) -> tuple[dict, pd.DataFrame] | None:
    """(scalar fields, table) of one session, or None when the checkpoint holds no such session."""
    # RocksDB's loader reports to the driver's StateStoreCoordinator, which Spark registers only
    # once the SparkSession's StreamingQueryManager exists; touch it so a batch job can read state.
    spark.streams.active  # noqa: B018 - the property is read for its side effect
    states = spark.read.format("statestore").load(checkpoint)
    value = states.schema["value"].dataType
    grouped = isinstance(value, StructType) and "groupState" in value.fieldNames()
    fields = "value.groupState" if grouped else "value"
    rows = (states.where((F.col("key.topic") == topic) & (F.col("key.group_session") == session))
            .select(*[F.col(f"{fields}.{f.name}").alias(f.name) for f in STATE_FIELDS])
            .collect())
    if not rows:
        return None
    stored = rows[0].asDict()
    # The session's scalars as the state holds them (plain values, as ``sessions`` shows them),
    # its times aside.
    info = {"topic": topic, "session": session,
            **{f.column: stored[f.name] for f in SESSION_FIELDS if not f.is_time}}
    blob = stored["table"]
    read = jvm_blob.read_table if jvm_blob.is_jvm_blob(blob) else read_table
    state = state_from_tuple(tuple(rows[0]), schema, read=read)
    return info, state.table.sort_index()
