"""The Delta sinks: ``row_changes``, ``current_rows``, ``sessions`` and ``violations``, written from
one foreachBatch.

The micro-batch is persisted once, so the stateful step runs once per batch.  A violation row
fails the batch before any table is touched; a recorded one (a drift, or in quarantine mode a
violation or a record set aside) is appended to ``violations``, exactly once like the changes.  The append uses Delta's idempotent writes
(``txnAppId`` = the streaming query's id, ``txnVersion`` = batch id) and the MERGEs are guarded by
``seq``, so a batch that is re-run after a crash neither loses nor repeats a change.  The query id
is the checkpoint's own (Spark keeps it there), so a writer is its checkpoint, however its path is
spelled; ``run`` records it on the tables (``reconstructor.writer``) before its first write.

After the append, the ``current_rows`` and ``sessions`` MERGEs run side by side: each is its own
Delta transaction on its own table, and much of a MERGE is driver-side planning and commit that
the other can fill.  Delta takes the idempotent-DML settings from the SparkSession's conf, so each
MERGE thread writes through its own ``SparkSession`` (same context and cache, own conf; see
``reconstructor.spark.transactions``).
"""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

from delta.tables import DeltaTable
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.util import inheritable_thread_target

from reconstructor.core.violations import IntegrityViolation, ViolationKind
from reconstructor.core.data_loss import offsets_from_log
from reconstructor.contract.writer import (REPLAYS_PROPERTY, WRITER_PROPERTY, TableState, batch_metadata,
                                       furthest, offsets_in_metadata, reached_everywhere, refusal,
                                       replays_of, takeover_refusal, with_replay)
from reconstructor.errors import IntegrityViolationError, ReconstructorError, RunAgain, UsageError, error_line
from reconstructor.metrics.batch import STATUSES, VIOLATION_KINDS, BatchCounts
from reconstructor.core.state import SessionStatus
from reconstructor.contract.tables import (CURRENT_ROWS, CURRENT_ROWS_FIELDS, ROW_CHANGES, ROW_CHANGES_FIELDS,
                                  SESSION_FIELDS, SESSION_INFO_DDL, SESSION_INFO_FIELDS, SESSIONS,
                                  SESSIONS_DDL, SESSIONS_FIELDS, TABLES, VIOLATION_INFO_DDL, VIOLATIONS,
                                  VIOLATIONS_DDL, VIOLATIONS_FIELDS, RecordKind, SessionField, column_names,
                                  current_rows_ddl, row_changes_ddl, table_path)
from reconstructor.contract.row_schema import RowSchema
from reconstructor.spark.checkpoint import read_checkpoint_file
from reconstructor.spark.compaction import compact_live_tables
from reconstructor.spark.transactions import IdempotentDml, side_by_side, spark_like

# current_rows and sessions are MERGEd every batch; bin-pack them between batches this often.
LIVE_COMPACTION_EVERY = 50
# How long a batch waits for ``set_query_id`` (called right after ``writer.start()`` returns).
QUERY_ID_WAIT_S = 600

# How many of a table's latest commits a takeover searches for its writer's last batch (a replay,
# compactions and a second table write of a batch commit in between).
HISTORY_SEARCHED = 200

# How many batches' phase timings a run keeps (``DeltaSinks.timings``).
TIMINGS_KEPT = 100

# A session record's ``info``, parsed: a struct column of the session's fields.
SESSION_INFO = "session_info"


DRIFT = ViolationKind.SNAPSHOT_DRIFT.value


@dataclass(frozen=True)
class Recorded:
    """What one micro-batch wrote to ``violations``."""

    set_aside: int  # violations, and records skipped while their session is quarantined
    sessions: int  # the sessions those records belong to (a record naming none counts as one)
    drifts: int  # snapshot drifts


@dataclass(frozen=True)
class BatchTimings:
    """Where one written micro-batch spent its seconds: ``compute`` (the parse and the stateful
    step, into the batch cache, with the one stats pass), ``append`` (``row_changes`` and
    ``violations``) and ``merges`` (the ``current_rows`` and ``sessions`` MERGEs side by side; each
    one's own seconds in ``tables``)."""

    compute: float
    append: float
    merges: float
    tables: dict[str, float]

    @property
    def writes(self) -> float:
        """The Delta transactions' wall time."""
        return self.append + self.merges


def _is(kind: RecordKind) -> Column:
    """The output record is of ``kind``."""
    return F.col("record") == kind.value


def _timed(write: Callable[[], None]) -> Callable[[], float]:
    """``write`` returning its own seconds."""
    def timed() -> float:
        started = time.perf_counter()
        write()
        return time.perf_counter() - started
    return timed


def _history_point(side: str) -> str:
    """Where a session record stands in its session's history, as a SQL pair: its last applied
    offset (none yet: -1), then its status in the order a session passes through them at one
    offset (open, then timed out, then quarantined; an end is applied at its own offset)."""
    rank = " ".join(f"WHEN '{s.value}' THEN {i}" for i, s in enumerate(
        (SessionStatus.OPEN, SessionStatus.TIMED_OUT, SessionStatus.QUARANTINED, SessionStatus.ENDED)))
    return f"coalesce({side}.last_offset, -1)", f"CASE {side}.status {rank} END"


def _at_or_after() -> str:
    (s_offset, s_rank), (t_offset, t_rank) = _history_point("source"), _history_point("target")
    return f"({s_offset} > {t_offset} OR ({s_offset} = {t_offset} AND {s_rank} >= {t_rank}))"


#: A session record that is at or after the ``sessions`` row's point in the session's history: only
#: such a record replaces the row (a re-run of a batch is at it; a replay into the tables, or a run
#: behind one, is before it until it catches up).
AHEAD = _at_or_after()


def _session_column(field: SessionField) -> Column:
    """A ``sessions`` column from a session record: its partition column, else its info's field (a
    time from epoch microseconds)."""
    if field not in SESSION_INFO_FIELDS:
        return F.col(field.name).alias(field.column)
    value = F.col(f"{SESSION_INFO}.{field.name}")
    return (F.timestamp_micros(value) if field.is_time else value).alias(field.column)


@dataclass
class DeltaSinks:
    """The three output tables under one output root (local path or ``s3a://bucket/prefix``)."""

    spark: SparkSession
    output: str
    schema: RowSchema
    #: Replays re-read changes the output may already hold: insert a change only when its
    #: (topic, partition, offset, row_pos, row_id) is absent, instead of a blind append.  A replay
    #: may write any writer's tables; it records itself among their replays, not as their writer.
    dedupe_changes: bool = False
    #: The violation a batch stopped on, for the driver to report as it is (a query's failure
    #: reaches the caller only as text).
    violation: IntegrityViolation | None = field(default=None, init=False)
    _writers: dict[str, SparkSession] = field(default_factory=dict, init=False, repr=False)
    _tables: Future | None = field(default=None, init=False, repr=False)
    _query_id: str | None = field(default=None, init=False, repr=False)
    _query_started: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _recorded: dict[str, TableState] = field(default_factory=dict, init=False, repr=False)
    _claimed: bool = field(default=False, init=False, repr=False)
    #: Where the tables may hold sessions past this query ({}: anywhere), None when nowhere.
    _ahead: dict | None = field(default_factory=dict, init=False, repr=False)
    #: The running batch's record in each of its commits (``batch_metadata``).
    _metadata: str | None = field(default=None, init=False, repr=False)
    #: Per batch id, what it recorded in ``violations`` (batches that recorded nothing are absent).
    recorded: dict[int, "Recorded"] = field(default_factory=dict, init=False, repr=False)
    #: Told each written batch's counts (``reconstructor.metrics.batch``), from the same aggregation.
    on_counts: Callable[[int, BatchCounts], None] | None = None
    #: Asked, once a batch's records were fetched, which records never processed are gone from
    #: Kafka (``reconstructor.spark.data_loss``); the first one stops the batch before it writes.
    loss_check: Callable[[int], list] | None = None
    #: Quarantine mode: where the losses the run goes on past are kept (``LossRegistry``); in fail
    #: mode (None) a loss stops the run.
    loss_registry: object | None = None
    #: Checked before each micro-batch writes (``WriterLease.check``): raises once this driver no
    #: longer holds the output's writer lease.
    lease_check: Callable[[], None] | None = None
    #: The error a batch stopped on that is not the engine's (a lost lease), reported as it is.
    stopped_by: Exception | None = field(default=None, init=False, repr=False)
    #: Why the batch stopped to run again (losses newly recorded, a topic created again): the query
    #: starts again from its checkpoint (``reconstructor.errors.RunAgain``).
    run_again: RunAgain | None = field(default=None, init=False, repr=False)
    #: Per batch id, the last ``TIMINGS_KEPT`` written batches' phase timings.
    timings: dict[int, BatchTimings] = field(default_factory=dict, init=False, repr=False)

    def check_writer(self, checkpoint) -> None:
        """Refuse (``UsageError``) to write tables another writer holds, before Kafka is read.

        ``checkpoint`` is the query's ``CheckpointState``; what the tables record is kept, so the
        first batch only records this writer where it is not recorded yet."""
        states = self._table_states()
        self._recorded = {t.name: t for t in states}
        reason = refusal(checkpoint, states, self.output, replay=self.dedupe_changes)
        if reason is None and not self.dedupe_changes:
            reason = self._takeover_refusal(checkpoint, states)
        if reason is not None:
            raise UsageError(reason)
        self._ahead = self._written_ahead(checkpoint, states)

    def _written_ahead(self, checkpoint, states: list[TableState]) -> dict | None:
        """Where the tables may hold sessions past this query (each batch then checks, ``_sessions_
        behind``), or None when they cannot: a replay may be anywhere; a run is behind only where a
        replay into its tables, recorded in their history, got further than its checkpoint."""
        if self.dedupe_changes:
            return {}
        if not any(t.has_data and t.replays for t in states):
            return None  # no other driver ever wrote them
        written = furthest(self._recorded_offsets(SESSIONS, None))
        if not written:
            return {}  # written by an earlier version: unknown, so checked
        reached = self._committed_offsets(checkpoint)
        return None if reached and reached_everywhere(reached, written) else written

    def _takeover_refusal(self, checkpoint, states: list[TableState]) -> str | None:
        """A run on a replay's checkpoint takes over only at or past where the tables' writer got
        to on every partition (tables of an earlier version record no offsets: not checked)."""
        writers = {t.writer for t in states if t.has_data and t.writer not in (None, checkpoint.query_id)
                   and checkpoint.query_id in t.replays}
        if not writers:
            return None
        writer = writers.pop()
        # Each table's last commit by the writer: a batch may have ended between two tables.
        written = furthest(next(iter(self._recorded_offsets(name, writer)), {}) for name in TABLES)
        if not written:
            return None
        return takeover_refusal(writer, written, checkpoint, self._committed_offsets(checkpoint), self.output)

    def _recorded_offsets(self, name: str, writer: str | None) -> Iterator[dict]:
        """The offsets that ``writer``'s (any writer's, for None) commits among the table's recent
        ones record, newest first (``batch_metadata``)."""
        path = self.path(name)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return
        for r in DeltaTable.forPath(self.spark, path).history(HISTORY_SEARCHED).select("userMetadata").collect():
            found = offsets_in_metadata(r.userMetadata, writer)
            if found is not None:
                yield found

    def _committed_offsets(self, checkpoint) -> dict:
        """The Kafka offsets the checkpoint's last committed batch ended at ({} before any)."""
        if checkpoint.last_committed is None:
            return {}
        text = read_checkpoint_file(self.spark, checkpoint.location, f"offsets/{checkpoint.last_committed}")
        return offsets_from_log(text) if text else {}

    def _table_states(self) -> list[TableState]:
        """Each existing table's writer and whether it holds data, from its Delta log alone."""
        def read(name):
            path = self.path(name)
            if not DeltaTable.isDeltaTable(self.spark, path):
                return None
            detail = DeltaTable.forPath(self.spark, path).detail().collect()[0]
            props = detail.properties or {}
            return TableState(name, (detail.numFiles or 0) > 0, props.get(WRITER_PROPERTY),
                              replays_of(props.get(REPLAYS_PROPERTY)))

        try:
            found = side_by_side(self.spark, *[functools.partial(read, name) for name in TABLES])
        except Exception as exc:  # noqa: BLE001 - any failure here is the output's
            raise ReconstructorError(
                f"cannot read the output tables under {self.output}: {error_line(exc)}") from exc
        return [state for state in found if state is not None]

    def set_query_id(self, query_id: str) -> None:
        """The streaming query's id (``StreamingQuery.id``), right after ``writer.start()``."""
        self._query_id = query_id
        self._query_started.set()

    @property
    def query_id(self) -> str:
        # foreachBatch may run the first batch before writer.start() has returned in the caller.
        # The id is handed over through an event rather than read from the checkpoint's metadata
        # file before start: a new checkpoint has no such file until the query starts, and Spark's
        # own StreamingQuery.id is the same for local and s3a:// checkpoints with no extra read.
        if not self._query_started.wait(QUERY_ID_WAIT_S):
            raise ReconstructorError("the streaming query started writing before it had an id")
        return self._query_id

    @property
    def app_id(self) -> str:
        """Delta's idempotency id: one per writer, which is its checkpoint's query."""
        return f"reconstructor-{self.query_id}"

    def path(self, name: str) -> str:
        return table_path(self.output, name)

    def ensure_tables(self) -> None:
        """Create the tables with explicit schemas and properties when they do not exist."""
        specs = [
            (ROW_CHANGES, row_changes_ddl(self.schema), ["hour"],
             {"delta.appendOnly": "true"}),
            (CURRENT_ROWS, current_rows_ddl(self.schema), [], {}),
            (SESSIONS, SESSIONS_DDL, [], {}),
            (VIOLATIONS, VIOLATIONS_DDL, [], {"delta.appendOnly": "true"}),
        ]

        def create(name, ddl, parts, props):
            builder = (DeltaTable.createIfNotExists(self.spark).location(self.path(name))
                       .addColumns(StructType.fromDDL(ddl)))
            if parts:
                builder = builder.partitionedBy(*parts)
            for key, value in {**props, "reconstructor.table": name,
                               "reconstructor.row_schema": self.schema.name}.items():
                builder = builder.property(key, value)
            builder.execute()

        # Independent tables: create them side by side (mostly driver round trips).
        side_by_side(self.spark, *[functools.partial(create, *spec) for spec in specs])

    def start_creating_tables(self) -> None:
        """``ensure_tables`` in the background; ``await_tables`` and the first write wait for it.

        Creating (or finding) the tables is a few driver round trips each; in the background it
        overlaps the query's start and its first batch's parse instead of delaying both.
        """
        pool = ThreadPoolExecutor(1, thread_name_prefix="ensure-tables")
        self._tables = pool.submit(inheritable_thread_target(self.spark)(self.ensure_tables))
        pool.shutdown(wait=False)

    def await_tables(self) -> None:
        """Wait for ``start_creating_tables``; its failure as one line."""
        if self._tables is None:
            return
        try:
            self._tables.result()
        except Exception as exc:  # noqa: BLE001 - any failure here is the output's
            raise ReconstructorError(
                f"cannot create the output tables under {self.output}: {error_line(exc)}") from exc

    # ------------------------------------------------------------------------------------------

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function."""
        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        started = time.perf_counter()
        try:
            # One pass computes the batch (the stateful step runs once, into the cache) and answers
            # every question asked before writing: empty? a violation? sessions that closed?
            is_session = _is(RecordKind.SESSION)
            stats = batch.agg(
                F.count(F.lit(1)).alias("records"),
                # Of several sessions' violations, the first record in Kafka order: the one a
                # run with smaller micro-batches would have stopped at.
                F.min_by("info", F.when(_is(RecordKind.VIOLATION),
                                        F.struct("topic", "partition", "offset"))).alias("violation"),
                F.count(F.when(is_session & (F.get_json_object("info", "$.status") != SessionStatus.OPEN.value), 1))
                .alias("closed"),
                F.count(F.when(_is(RecordKind.RECORDED), 1)).alias("recorded"),
                F.count(F.when(_is(RecordKind.RECORDED) & (F.get_json_object("info", "$.kind") == DRIFT), 1))
                .alias("drifts"),
                F.count_distinct(F.when(_is(RecordKind.RECORDED) & (F.get_json_object("info", "$.kind") != DRIFT),
                                        F.struct("topic", "session"))).alias("sessions_set_aside"),
                # For the metrics: session records by status, recorded rows by kind.
                *[F.count(F.when(is_session & (F.get_json_object("info", "$.status") == s), 1)).alias(f"status_{s}")
                  for s in STATUSES],
                *[F.count(F.when(_is(RecordKind.RECORDED) & (F.get_json_object("info", "$.kind") == k), 1))
                  .alias(f"kind_{k}") for k in VIOLATION_KINDS],
            ).collect()[0]
            computed = time.perf_counter()
            losses = self.loss_check(batch_id) if self.loss_check is not None else []
            if losses and self.loss_registry is None:
                self.violation = losses[0].violation()
                raise IntegrityViolationError(self.violation)
            if losses:
                new = self.loss_registry.add(losses)
                if new:
                    self.run_again = RunAgain.after_losses(new)
                    raise self.run_again
            if self.loss_check is not None and self.loss_check.reread:
                self.run_again = RunAgain.to_reread(self.loss_check.reread)
                self.loss_check.read_again(batch_id)
                raise self.run_again
            if losses:
                self.loss_check.accept()
            if stats.records == 0 and not losses:
                return  # a no-data batch (session timeouts found nothing): no Delta commit at all
            if stats.violation is not None:
                self.violation = IntegrityViolation.from_json(stats.violation)
                raise IntegrityViolationError(self.violation)
            self.await_tables()
            if self.lease_check is not None:
                try:
                    self.lease_check()
                except Exception as exc:
                    self.stopped_by = exc
                    raise
            self._record_writer()
            end = getattr(self.loss_check, "batch_end", None)
            self._metadata = batch_metadata(self.query_id, batch_id, end or {})
            changes = batch.filter(_is(RecordKind.CHANGE))
            current = batch.filter((_is(RecordKind.CHANGE) & F.col("is_latest")) | _is(RecordKind.CURRENT))
            sessions = (batch.filter(_is(RecordKind.SESSION))
                        .withColumn(SESSION_INFO, F.from_json("info", SESSION_INFO_DDL)))
            self._append_changes(changes, batch_id)
            if stats.recorded or losses:
                recorded = batch.filter(_is(RecordKind.RECORDED)).select("topic", "info")
                if losses:  # each lost partition's own row, beside its sessions' rows
                    recorded = recorded.unionByName(self.spark.createDataFrame(
                        [(d.topic, d.violation().to_json()) for d in losses], "topic STRING, info STRING"))
                self._append_violations(recorded, batch_id)
                self.recorded[batch_id] = Recorded(stats.recorded - stats.drifts, stats.sessions_set_aside,
                                                   stats.drifts)
            # Sessions the tables hold at a later point (a replay into them, or a run behind one):
            # their rows stay as they are, and the sessions MERGE keeps their row too.
            behind = self._sessions_behind(sessions) if self._ahead is not None else None
            if self._ahead and end and reached_everywhere(end, self._ahead):
                self._ahead = None  # caught up: from the next batch on, nothing is ahead
            if behind is not None:
                current = current.join(behind, ["topic", "session"], "left_anti")
                sessions = sessions.join(behind, ["topic", "session"], "left_anti")
            appended = time.perf_counter()
            tables = dict(zip((CURRENT_ROWS, SESSIONS), side_by_side(
                self.spark,
                _timed(lambda: self._write_current_rows(current, sessions, batch_id, closed=stats.closed > 0)),
                _timed(lambda: self._write_sessions(sessions, batch_id)),
            )))
            merged = time.perf_counter()
            self.timings[batch_id] = BatchTimings(computed - started, appended - computed, merged - appended,
                                                  tables)
            self.timings.pop(batch_id - TIMINGS_KEPT, None)
            if batch_id % LIVE_COMPACTION_EVERY == LIVE_COMPACTION_EVERY - 1:
                compact_live_tables(self.spark, self.output)
            if self.on_counts is not None:
                self.on_counts(batch_id, BatchCounts({s: stats[f"status_{s}"] for s in STATUSES},
                                                     {k: stats[f"kind_{k}"] for k in VIOLATION_KINDS}))
        finally:
            batch.unpersist()

    def _record_writer(self) -> None:
        """Before the first write: a run records its query as the tables' writer, a replay adds its
        query to the tables' replays (so a run may carry on from its checkpoint)."""
        if self._claimed:
            return
        query_id = self.query_id
        recorded = {name: self._recorded.get(name) or TableState(name, False, None) for name in TABLES}
        if self.dedupe_changes:
            changes = {name: (REPLAYS_PROPERTY, with_replay(t.replays, query_id))
                       for name, t in recorded.items() if query_id not in t.replays}
        else:
            changes = {name: (WRITER_PROPERTY, query_id)
                       for name, t in recorded.items() if t.writer != query_id}

        def record(name):
            key, value = changes[name]
            self.spark.sql(f"ALTER TABLE delta.`{self.path(name)}` SET TBLPROPERTIES ('{key}' = '{value}')")

        side_by_side(self.spark, *[functools.partial(record, name) for name in changes])
        self._claimed = True

    def _write_current_rows(self, current: DataFrame, sessions: DataFrame, batch_id: int,
                            closed: bool) -> None:
        with self._txn(batch_id, CURRENT_ROWS):
            self._merge_current_rows(current)
        if closed:  # after the MERGE, so a closing session's last changes land before it leaves
            with self._txn(batch_id, CURRENT_ROWS, step="-closed"):
                self._delete_closed_sessions(sessions)

    def _write_sessions(self, sessions: DataFrame, batch_id: int) -> None:
        with self._txn(batch_id, SESSIONS):
            self._merge_sessions(sessions)

    def _writer(self, table: str) -> SparkSession:
        """The SparkSession that writes ``table``: its own SQL conf, because Delta takes the
        idempotent-DML settings from it and two tables are written at once."""
        if table not in self._writers:
            self._writers[table] = spark_like(self.spark)
        return self._writers[table]

    def _append_changes(self, changes: DataFrame, batch_id: int) -> None:
        cols = column_names(ROW_CHANGES_FIELDS, self.schema)
        out = changes.withColumn("hour", F.date_format("kafka_ts", "yyyy-MM-dd-HH")).select(*cols)
        if self.dedupe_changes:
            with self._txn(batch_id, ROW_CHANGES):
                (DeltaTable.forPath(self._writer(ROW_CHANGES), self.path(ROW_CHANGES)).alias("target")
                 .merge(out.alias("source"), "target.hour = source.hour AND target.topic = source.topic AND "
                        "target.partition = source.partition AND target.offset = source.offset AND "
                        "target.row_pos = source.row_pos AND target.row_id = source.row_id")
                 .whenNotMatchedInsertAll()
                 .execute())
            return
        (out.write.format("delta").mode("append")
            .option("txnAppId", f"{self.app_id}-{ROW_CHANGES}")
            .option("txnVersion", batch_id)
            .option("userMetadata", self._metadata)
            .save(self.path(ROW_CHANGES)))

    def _append_violations(self, recorded: DataFrame, batch_id: int) -> None:
        """The batch's recorded rows, exactly once: an idempotent append (a replay inserts a row
        only when its record, kind and session are absent: a lost partition's sessions share their
        record)."""
        info = F.from_json("info", VIOLATION_INFO_DDL)
        out = (recorded.select("topic", info.alias("v"))
               .select("topic", *[F.col(f"v.{name}").alias(name) for name in column_names(VIOLATIONS_FIELDS)
                                  if name not in ("topic", "detected_at")],
                       F.current_timestamp().alias("detected_at"))
               .select(*column_names(VIOLATIONS_FIELDS)))
        if self.dedupe_changes:
            with self._txn(batch_id, VIOLATIONS):
                (DeltaTable.forPath(self._writer(VIOLATIONS), self.path(VIOLATIONS)).alias("target")
                 .merge(out.alias("source"), "target.topic = source.topic AND target.partition = source.partition "
                        "AND target.offset = source.offset AND target.kind = source.kind "
                        "AND target.session <=> source.session")
                 .whenNotMatchedInsertAll()
                 .execute())
            return
        (out.write.format("delta").mode("append")
            .option("txnAppId", f"{self.app_id}-{VIOLATIONS}")
            .option("txnVersion", batch_id)
            .option("userMetadata", self._metadata)
            .save(self.path(VIOLATIONS)))

    def _merge_current_rows(self, current: DataFrame) -> None:
        # The last change of each touched row in this batch; older batches are fenced off by the
        # offset (a session lives in one partition).
        cols = column_names(CURRENT_ROWS_FIELDS, self.schema)
        source = current.withColumn("updated_at", F.col("event_ts")).select(*cols, "op")
        target = DeltaTable.forPath(self._writer(CURRENT_ROWS), self.path(CURRENT_ROWS))
        assign = {c: f"source.`{c}`" for c in cols}
        (target.alias("target").merge(
            source.alias("source"),
            "target.topic = source.topic AND target.session = source.session AND target.row_id = source.row_id")
         .whenMatchedDelete(condition="source.op = 'delete' AND source.offset >= target.offset")
         .whenMatchedUpdate(condition="source.offset >= target.offset", set=assign)
         .whenNotMatchedInsert(condition="source.op <> 'delete'", values=assign)
         .execute())

    def _delete_closed_sessions(self, sessions: DataFrame) -> None:
        """A session that ended, timed out or was quarantined leaves the live table."""
        closed = (sessions.filter(F.col(f"{SESSION_INFO}.status") != SessionStatus.OPEN.value)
                  .select("topic", "session", "offset"))
        target = DeltaTable.forPath(self._writer(CURRENT_ROWS), self.path(CURRENT_ROWS))
        (target.alias("target").merge(closed.alias("source"),
                                      "target.topic = source.topic AND target.session = source.session")
         .whenMatchedDelete(condition="target.offset <= source.offset")
         .execute())

    def _sessions_behind(self, sessions: DataFrame) -> DataFrame | None:
        """The (topic, session) keys of this batch's sessions that the ``sessions`` table holds at a
        later point of their history (``AHEAD``), else None: read once, before the tables are
        written, so the two MERGEs judge alike."""
        batch = sessions.select("topic", "session", F.col(f"{SESSION_INFO}.last_offset").alias("last_offset"),
                                F.col(f"{SESSION_INFO}.status").alias("status"))
        table = (self.spark.read.format("delta").load(self.path(SESSIONS))
                 .select("topic", "session", "last_offset", "status"))
        keys = (batch.alias("source").join(table.alias("target"), ["topic", "session"])
                .where(~F.expr(AHEAD)).select("topic", "session").collect())
        if not keys:
            return None
        return self.spark.createDataFrame([tuple(k) for k in keys], "topic STRING, session STRING")

    def _merge_sessions(self, sessions: DataFrame) -> None:
        source = sessions.select(
            "topic", "session", *[_session_column(f) for f in SESSION_FIELDS],
            F.current_timestamp().alias("updated_at"), F.col(f"{SESSION_INFO}.chain_head").alias("chain_head"),
        )
        cols = column_names(SESSIONS_FIELDS)
        assign = {c: f"source.`{c}`" for c in cols}
        target = DeltaTable.forPath(self._writer(SESSIONS), self.path(SESSIONS))
        (target.alias("target").merge(source.alias("source"),
                                      "target.topic = source.topic AND target.session = source.session")
         .whenMatchedUpdate(condition=AHEAD, set=assign)
         .whenNotMatchedInsertAll()
         .execute())

    def _txn(self, batch_id: int, table: str, step: str = ""):
        """Idempotency for one Delta transaction on ``table``; ``step`` tells apart a second one
        on the same table in the same batch."""
        return IdempotentDml(self._writer(table), f"{self.app_id}-{table}{step}", batch_id, self._metadata)
