"""Delta transactions written side by side from one driver.

Several tables are written at once (the sinks' MERGEs, the table creation, the writer records):
much of a Delta write is driver-side planning and commit that another write can fill.  Delta takes
a MERGE's commit settings (its ``userMetadata``, and the idempotent-DML ids ``txnAppId`` and
``txnVersion`` where they are used) from the SparkSession's conf, so each concurrent writer has a
SparkSession of its own on the same context (``spark_like``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession
from pyspark.util import inheritable_thread_target

#: Delta's setting for the ``userMetadata`` of every commit made on a SparkSession.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def spark_like(spark: SparkSession) -> SparkSession:
    """A SparkSession on the same context with the same runtime SQL settings (``newSession`` alone
    starts from the context's conf, without settings made since)."""
    other = spark.newSession()
    for key, value in spark.conf.getAll.items():
        if spark.conf.isModifiable(key):
            other.conf.set(key, value)
    return other


def side_by_side(spark: SparkSession, *writes) -> list:
    """Run independent table writes in threads that inherit the caller's job group (stopping the
    query cancels them too); wait for all; raise the first failure, else return their results."""
    if not writes:
        return []
    with ThreadPoolExecutor(len(writes), thread_name_prefix="delta-sink") as pool:
        futures = [pool.submit(inheritable_thread_target(spark)(write)) for write in writes]
    return [future.result() for future in futures]


class IdempotentDml:
    """The commit settings of one MERGE (or DELETE) on ``spark``, reset afterwards: its
    ``user_metadata`` (``reconstructor.contract.writer.batch_metadata``) in the commit's
    ``commitInfo``, and with an ``app_id`` Delta's idempotent-DML ids, under which Delta skips a
    re-run of the same (``app_id``, ``version``)."""

    def __init__(self, spark: SparkSession, app_id: str | None, version: int, user_metadata: str | None = None):
        self.spark, self.app_id, self.version = spark, app_id, version
        self.user_metadata = user_metadata

    def __enter__(self):
        if self.app_id is not None:
            self.spark.conf.set("spark.databricks.delta.write.txnAppId", self.app_id)
            self.spark.conf.set("spark.databricks.delta.write.txnVersion", str(self.version))
        if self.user_metadata is not None:
            self.spark.conf.set(USER_METADATA, self.user_metadata)
        return self

    def __exit__(self, *exc):
        self.spark.conf.unset("spark.databricks.delta.write.txnAppId")
        self.spark.conf.unset("spark.databricks.delta.write.txnVersion")
        self.spark.conf.unset(USER_METADATA)
        return False
