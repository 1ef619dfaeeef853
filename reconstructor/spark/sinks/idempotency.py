"""What makes each of a batch's writes exactly-once (``contract.batch_writes``).

Every commit of a batch records, in its ``userMetadata``, the writer's query, the batch id and
which write it is.  The batch that the checkpoint planned and did not record (a run stopped inside
it) looks up which of its writes its tables already hold (``WrittenBatches``) and skips those; any
other batch writes without a look.  A batch whose earlier attempt an earlier release made, which
named no write, takes Delta's transaction ids for that table as that release did (``txnAppId`` =
the writer's id and the write, ``txnVersion`` = the batch id).  An append takes them as write
options, a MERGE or DELETE from the SparkSession's conf, so each table is written through a
SparkSession of its own (two tables are written at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from reconstructor.contract.batch_writes import (
    NOTHING_FOUND,
    FoundWrites,
    WriteMode,
    found_writes,
    planned_at,
    unknown_writes_line,
    with_write,
    write_name,
)
from reconstructor.contract.tables import table_path
from reconstructor.contract.writer import newest_first
from reconstructor.errors import WritesUnknown
from reconstructor.spark.builder import PUT_IF_ABSENT_LOG_STORE, S3A_LOG_STORE_KEY
from reconstructor.spark.checkpoint import checkpoint_file_modified, read_checkpoint_file
from reconstructor.spark.sinks.history import HISTORY_SEARCHED, commit_history
from reconstructor.spark.sinks.query_id import QueryId
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


@dataclass
class WrittenBatches:
    """Which writes of a batch an earlier attempt committed, for one start of the query.

    ``pending`` is the batch the checkpoint planned and did not record when the query started
    (None: it recorded every batch it planned); ``created`` the tables absent then, which hold no
    earlier attempt of anything.  Only the pending batch looks, once per table, at the table's
    newest commits.  ``fenced``: a driver paused past its writer lease cannot commit once another
    driver took it (``fenced_commits``); where it could, every write keeps Delta's transaction ids,
    which make such a late commit of a batch conflict instead of repeating it.  ``checkpoint``:
    where the query's checkpoint is, whose ``offsets/`` say when the pending batch was planned
    (``found_writes``); ``replay``: whether the query is a replay's (the advice of a stop)."""

    spark: SparkSession
    output: str
    query: QueryId
    pending: int | None = None
    created: frozenset[str] = frozenset()
    fenced: bool = True
    checkpoint: str | None = None
    replay: bool = False
    _found: dict[tuple[str, int], FoundWrites] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def mode(self, table: str, write: str, batch_id: int) -> WriteMode:
        """How ``batch_id``'s ``write`` on ``table`` goes."""
        mode = WriteMode.WRITE
        if self.pending is not None and batch_id <= self.pending and table not in self.created:
            mode = self._found_in(table, batch_id).mode(write)
        return WriteMode.DELTA if mode is WriteMode.WRITE and not self.fenced else mode

    def _found_in(self, table: str, batch_id: int) -> FoundWrites:
        with self._lock:
            if (table, batch_id) not in self._found:
                self._found[(table, batch_id)] = self._look(table, batch_id)
            return self._found[(table, batch_id)]

    def _look(self, table: str, batch_id: int) -> FoundWrites:
        path = table_path(self.output, table)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return NOTHING_FOUND
        commits = newest_first(commit_history(DeltaTable.forPath(self.spark, path)), HISTORY_SEARCHED)
        found = found_writes(((r.version, r.millis, r.userMetadata) for r in commits), self.query.get(), batch_id,
                             self._planned_at(batch_id))
        if found is None:
            raise WritesUnknown(unknown_writes_line(batch_id, path, self.replay))
        return found

    def _planned_at(self, batch_id: int) -> int | None:
        """When the checkpoint planned ``batch_id`` (``batch_writes.planned_at``); None unknown."""
        if self.checkpoint is None:
            return None
        relative = f"offsets/{batch_id}"
        modified = checkpoint_file_modified(self.spark, self.checkpoint, relative)
        text = read_checkpoint_file(self.spark, self.checkpoint, relative)
        return None if modified is None or text is None else planned_at(modified, text)


@dataclass(frozen=True)
class BatchTransactions:
    """One batch's writes under ``output``: each skipped when an earlier attempt of the batch
    committed it (``written``), and ``metadata`` (the batch's ``batch_metadata``) with the write's
    name in its commit.  ``before_write`` runs before each one (the writer lease's check)."""

    writers: TableWriters
    output: str
    app_id: str
    batch_id: int
    metadata: str
    written: WrittenBatches
    before_write: Callable[[], None] | None = None

    def path(self, table: str) -> str:
        return table_path(self.output, table)

    def target(self, table: str) -> DeltaTable:
        """``table`` to MERGE into, through its own SparkSession."""
        return DeltaTable.forPath(self.writers(table), self.path(table))

    def _mode(self, table: str, write: str) -> WriteMode:
        if self.before_write is not None:
            self.before_write()
        return self.written.mode(table, write, self.batch_id)

    def dml(self, table: str, run: Callable[[], object], step: str = "") -> None:
        """``run`` (one MERGE or DELETE on ``table``), once; ``step`` tells apart a second one on the
        same table in the same batch."""
        write = write_name(table, step)
        mode = self._mode(table, write)
        if mode is WriteMode.SKIP:
            return
        app_id = f"{self.app_id}-{write}" if mode is WriteMode.DELTA else None
        with IdempotentDml(self.writers(table), app_id, self.batch_id, with_write(self.metadata, write)):
            run()

    def append(self, out: DataFrame, table: str) -> None:
        """Append ``out`` to ``table``, once."""
        mode = self._mode(table, table)
        if mode is WriteMode.SKIP:
            return
        writer = out.write.format("delta").mode("append").option("userMetadata", with_write(self.metadata, table))
        if mode is WriteMode.DELTA:
            writer = writer.option("txnAppId", f"{self.app_id}-{table}").option("txnVersion", self.batch_id)
        writer.save(self.path(table))


def fenced_commits(spark: SparkSession, output: str, lease_token: str | None) -> bool:
    """Whether a driver paused past its writer lease is kept from committing to ``output`` once
    another driver took the lease: on a local path (no driver takes the lease while the holder's
    process lives, paused or not: ``FileLeaseStore.hold``), or on ``s3a://`` under a lease with
    ``PutIfAbsentLogStore``, which stores a commit only while the lease it names is the output's.
    Elsewhere (Databricks' commit service, another file system, a driver with no lease) nothing
    keeps it from committing."""
    scheme = urlparse(output).scheme
    if scheme in ("", "file"):
        return True
    return (scheme == "s3a" and lease_token is not None
            and spark.conf.get(S3A_LOG_STORE_KEY, None) == PUT_IF_ABSENT_LOG_STORE)
