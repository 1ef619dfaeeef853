"""The fleet seal in force in a table's log, read through Spark, and the commits the pipeline makes
outside a batch (a compaction's OPTIMIZE and VACUUM, a property, a column's comment) carrying it
forward.

Delta's log cleanup drops the commits older than ``delta.logRetentionDuration`` once a checkpoint
follows them.  On an idle output, compactions go on while no batch records a new seal; were their
commits to carry none, the cleanup would one day take the last seal out of the log and ``verify``
could no longer tell the tables from edited ones.  Such a commit changes no data, so the seal in
force still proves the table after it (``contract.fleet_history``).
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.fleet_history import SealedState, changes_data, sealed_state
from reconstructor.contract.writer import FLEET_LOOKBACK, carried_metadata, newest_first
from reconstructor.spark.checkpoint import read_checkpoint_file
from reconstructor.spark.transactions import USER_METADATA, spark_like

__all__ = ["CARRY_LOOKBACK", "fleet_state", "sealed_writer"]

#: How many of a table's newest commits a commit that carries the seal reads for it: the pipeline's
#: own commits all record or carry one, so only a user's commits come between; an output with no
#: seal (no chain key) costs no more than this look.
CARRY_LOOKBACK = 16


def fleet_state(spark: SparkSession, path: str, read_commits: bool = False, newest: int | None = None) -> SealedState:
    """The fleet seal in force in the table's log (an empty state when there is no table);
    ``read_commits``: also the newest commit after it that changed data without one, read from the
    log's files; ``newest``: among that many of its newest commits only (None: the whole log)."""
    if not DeltaTable.isDeltaTable(spark, path):
        return SealedState()
    table = DeltaTable.forPath(spark, path)

    def history(limit: int | None) -> list:
        return (table.history(limit) if limit else table.history()).select("version", "userMetadata").collect()

    commits = history(newest) if newest else newest_first(history, FLEET_LOOKBACK)
    return sealed_state(((r.version, r.userMetadata) for r in commits),
                        (lambda version: _data_changed(spark, path, version)) if read_commits else None)


def _data_changed(spark: SparkSession, path: str, version: int) -> bool | None:
    """Whether the table's commit ``version`` changed its data (None: its file has left the log)."""
    text = read_checkpoint_file(spark, path.rstrip("/"), f"_delta_log/{version:020d}.json")
    return None if text is None else changes_data(text)


def sealed_writer(spark: SparkSession, path: str) -> SparkSession:
    """A SparkSession whose commits to the table at ``path`` carry its fleet seal in force forward
    (``writer.carried_metadata``); ``spark`` itself when its log holds none to carry, or when a
    commit since changed data without one (that seal no longer proves the table: ``verify`` names
    the commit, and carrying the seal past it would hide which)."""
    state = fleet_state(spark, path, read_commits=True, newest=CARRY_LOOKBACK)
    if state.record is None or state.origin is None or state.unsealed is not None:
        return spark
    writer = spark_like(spark)
    writer.conf.set(USER_METADATA, carried_metadata(state.record.fleet, state.origin))
    return writer
