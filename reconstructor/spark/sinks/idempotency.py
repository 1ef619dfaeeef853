"""The Delta transaction ids that make each batch's writes exactly-once.

Every write of a batch carries ``txnAppId`` = the writer's id (``QueryId.app_id``) and the table
(and a step, for a second transaction on the same table), and ``txnVersion`` = the batch id: a
batch re-run after a crash is skipped by Delta wherever it had already committed.  An append takes
them as write options; a MERGE or DELETE from the SparkSession's conf, so each table is written
through a SparkSession of its own (two tables are written at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from reconstructor.contract.tables import table_path
from reconstructor.spark.transactions import IdempotentDml, spark_like


@dataclass
class TableWriters:
    """The SparkSession that writes each table: its own SQL conf, because Delta takes the
    idempotent-DML settings from it and two tables are written at once."""

    spark: SparkSession
    _sessions: dict[str, SparkSession] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, table: str) -> SparkSession:
        if table not in self._sessions:
            self._sessions[table] = spark_like(self.spark)
        return self._sessions[table]


@dataclass(frozen=True)
class BatchTransactions:
    """One batch's writes under ``output``: each with its transaction id, and ``metadata`` (the
    batch's ``batch_metadata``) in its commit."""

    writers: TableWriters
    output: str
    app_id: str
    batch_id: int
    metadata: str

    def path(self, table: str) -> str:
        return table_path(self.output, table)

    def target(self, table: str) -> DeltaTable:
        """``table`` to MERGE into, through its own SparkSession."""
        return DeltaTable.forPath(self.writers(table), self.path(table))

    def dml(self, table: str, step: str = "") -> IdempotentDml:
        """Idempotency for one Delta transaction on ``table``; ``step`` tells apart a second one
        on the same table in the same batch."""
        return IdempotentDml(self.writers(table), f"{self.app_id}-{table}{step}", self.batch_id, self.metadata)

    def append(self, out: DataFrame, table: str) -> None:
        """Append ``out`` to ``table``, idempotently."""
        (out.write.format("delta").mode("append")
            .option("txnAppId", f"{self.app_id}-{table}")
            .option("txnVersion", self.batch_id)
            .option("userMetadata", self.metadata)
            .save(self.path(table)))
