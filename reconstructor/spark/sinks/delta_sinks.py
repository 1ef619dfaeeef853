"""``DeltaSinks``: the foreachBatch of the streaming query, composing the sinks' parts in the order
that makes each batch's writes exactly-once (``reconstructor.spark.sinks``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.util import inheritable_thread_target

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import TABLES
from reconstructor.contract.writer import batch_metadata
from reconstructor.core.chain import HMAC_SHA256, ChainKey
from reconstructor.core.violations import ViolationRecord
from reconstructor.errors import WritesUnknown
from reconstructor.metrics.batch_metrics import BatchCounts
from reconstructor.spark.compaction import compact_live_tables
from reconstructor.spark.sinks import records
from reconstructor.spark.sinks.ahead import SessionsAhead, written_ahead
from reconstructor.spark.sinks.appends import append_changes, append_violations, new_violations, violation_rows
from reconstructor.spark.sinks.claim import WriterClaim
from reconstructor.spark.sinks.fleet_seal import FleetLedger, violations_sum
from reconstructor.spark.sinks.idempotency import BatchTransactions, TableWriters, WrittenBatches, fenced_commits
from reconstructor.spark.sinks.merges import empty_live_tables, merge_live_tables
from reconstructor.spark.sinks.query_id import QueryId
from reconstructor.spark.sinks.resync import ResyncRequests
from reconstructor.spark.sinks.stats import Recorded, batch_stats, counts_of, recorded_of
from reconstructor.spark.sinks.stops import BatchStops, RunAgain
from reconstructor.spark.sinks.tables import OutputTables
from reconstructor.spark.sinks.timings import BatchTimings, keep

if TYPE_CHECKING:
    from reconstructor.spark.data_loss import KafkaLossCheck, LossRegistry

# current_rows and sessions are MERGEd every batch; bin-pack them between batches this often.
LIVE_COMPACTION_EVERY = 50


@dataclass
class DeltaSinks:
    """The four output tables under one output root (local path or ``s3a://bucket/prefix``):
    ``row_changes``, ``current_rows``, ``sessions`` and ``violations``."""

    spark: SparkSession
    output: str
    schema: RowSchema
    #: Replays re-read changes the output may already hold: insert a change only when its
    #: (topic, partition, offset, row_pos, row_id) is absent, instead of a blind append.  A replay
    #: may write any writer's tables; it records itself among their replays, not as their writer.
    replay: bool = False
    #: Told each written batch's counts (``reconstructor.metrics.batch_metrics``), from the same aggregation.
    on_counts: Callable[[int, BatchCounts], None] | None = None
    #: The checks before each batch writes (``stops.BatchStops`` says what each is).
    loss_check: KafkaLossCheck | None = None
    loss_registry: LossRegistry | None = None
    lease_check: Callable[[], None] | None = None
    #: The token of the writer lease the batches are written under, recorded in each commit.
    lease_token: str | None = None
    #: Where quarantined sessions ask their sensors for a snapshot (``--resync-topic``); never on a replay.
    resync: ResyncRequests | None = None
    #: The chain's key: with one, each batch records the output's fleet seal (``fleet_seal``).
    chain_key: ChainKey | None = None
    #: Per batch id, what it recorded in ``violations`` (batches that recorded nothing are absent).
    recorded: dict[int, Recorded] = field(default_factory=dict, init=False, repr=False)
    #: Per batch id, the last ``timings.TIMINGS_KEPT`` written batches' phase timings.
    timings: dict[int, BatchTimings] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._tables = OutputTables(self.spark, self.output, self.schema)
        self._claim = WriterClaim(self._tables, replay=self.replay)
        self._query = QueryId()
        self._stops = BatchStops(self.loss_check, self.loss_registry, self.lease_check)
        self._ahead = SessionsAhead(self.spark, self.output, where={})
        self._writers = TableWriters(self.spark)
        #: The live tables known to hold no row (absent or empty when the writer was checked), until
        #: a batch writes them: their first write appends what a MERGE would insert (``merges``).
        self._empty: set[str] = set()
        #: Which writes of the batch the checkpoint left unrecorded are in the tables (``check_writer``).
        self._written: WrittenBatches | None = None
        self._claiming: Future | None = None  # the writer record, from ``set_query_id``
        self._idle = threading.Event()  # set while no batch is writing (``writing``)
        self._idle.set()
        self._fleet = (FleetLedger(self.spark, self.output, self.chain_key)
                       if self.chain_key is not None and self.chain_key.scheme == HMAC_SHA256 else None)

    # What a batch stopped on, for the driver to report as it is.
    @property
    def violation(self) -> ViolationRecord | None:
        return self._stops.violation

    @property
    def stopped_by(self) -> Exception | None:
        return self._stops.stopped_by

    @property
    def run_again(self) -> RunAgain | None:
        return self._stops.run_again

    def check_writer(self, checkpoint) -> None:
        """Refuse (``UsageError``) to write tables another writer holds, before Kafka is read;
        ``checkpoint`` is the query's ``CheckpointState``."""
        states = self._claim.check(checkpoint)
        self._ahead.where = written_ahead(self.spark, self.output, checkpoint, states, self.replay)
        self._empty = set(empty_live_tables(states))
        self._written = WrittenBatches(self.spark, self.output, self._query, checkpoint.pending,
                                       frozenset(TABLES) - {t.name for t in states},
                                       fenced_commits(self.spark, self.output, self.lease_token),
                                       checkpoint.location, self.replay)

    def set_query_id(self, query_id: str) -> None:
        """The streaming query's id (``StreamingQuery.id``), right after ``writer.start()``; the
        writer record (``claim.WriterClaim.record``) then starts in the background, once the tables
        exist, beside the first batch's computation, which it would otherwise precede."""
        self._query.set(query_id)
        pool = ThreadPoolExecutor(1, thread_name_prefix="writer-record")
        self._claiming = pool.submit(inheritable_thread_target(self.spark)(self._record_writer))
        pool.shutdown(wait=False)

    def _record_writer(self) -> None:
        self.await_tables()
        self._claim.record(self._query)

    @property
    def query_id(self) -> str:
        return self._query.get()

    @property
    def app_id(self) -> str:
        """Delta's idempotency id: one per writer, which is its checkpoint's query."""
        return self._query.app_id

    def path(self, name: str) -> str:
        return self._tables.path(name)

    def ensure_tables(self) -> None:
        """Create the tables with explicit schemas and properties when they do not exist."""
        self._tables.ensure()

    def start_creating_tables(self) -> None:
        """``ensure_tables`` in the background; ``await_tables`` and the first write wait for it."""
        self._tables.start_creating()

    def await_tables(self) -> None:
        """Wait for ``start_creating_tables``; its failure as one line."""
        self._tables.await_created()

    def writing(self, wait_s: float = 0.0) -> bool:
        """Whether a batch is still writing after waiting up to ``wait_s`` for it to end: a query
        stopped under a batch does not stop the batch's own threads, which may still commit."""
        return not self._idle.wait(wait_s)

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function, timed as in flight (``writing``)."""
        self._idle.clear()
        try:
            self._write_batch(batch, batch_id)
        finally:
            self._idle.set()

    def _write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The batch computed once, into the cache; checked; then the appends, then the MERGEs side
        by side."""
        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        started = time.perf_counter()
        try:
            stats = batch_stats(batch, seals=self._fleet is not None)
            computed = time.perf_counter()
            losses = self._stops.losses(batch_id)
            if stats.records == 0 and not losses:
                return  # a no-data batch (session timeouts found nothing): no Delta commit at all
            self._stops.check_violation(stats.violation)
            self.await_tables()
            self._stops.check_lease()
            if self._claiming is not None:
                self._claiming.result()
            self._claim.record(self._query)  # done by then, unless this batch began before set_query_id
            end = getattr(self.loss_check, "batch_end", None)
            violations = (violation_rows(records.recorded(self.spark, batch, losses))
                          if stats.recorded or losses else None)
            if self._written is None:
                raise RuntimeError("check_writer() comes before the first batch")
            txn = BatchTransactions(self._writers, self.output, self.app_id, batch_id,
                                    batch_metadata(self.query_id, batch_id, end or {},
                                                   self._fleet_seal(batch_id, stats, violations),
                                                   lease=self.lease_token),
                                    self._written, self._stops.check_lease)
            try:
                appended, tables = self._write(batch, txn, stats, violations, end)
            except WritesUnknown as exc:
                self._stops.stopped_by = exc  # reported as it is: its line says what to do
                raise
            merged = time.perf_counter()
            # After the tables: a request names the session's last applied seq as the batch left it.
            asked = (self.resync.send(txn, batch) if self.resync is not None and stats.recorded > stats.drifts
                     else 0)
            keep(self.timings, batch_id, BatchTimings(computed - started, appended - computed, merged - appended,
                                                      tables))
            if batch_id % LIVE_COMPACTION_EVERY == LIVE_COMPACTION_EVERY - 1:
                self._stops.check_lease()  # each OPTIMIZE commits right after the lease is found held
                compact_live_tables(self.spark, self.output)
            if self.on_counts is not None:
                self.on_counts(batch_id, counts_of(stats, resync_requests=asked))
        finally:
            batch.unpersist()

    def _fleet_seal(self, batch_id: int, stats: Row, violations: DataFrame | None) -> dict | None:
        """The batch's fleet seal on a keyed output (else None), before anything is written."""
        if self._fleet is None or self.chain_key is None:
            return None
        self._fleet.load()
        added = (violations_sum(new_violations(self.spark, self.output, violations, self.replay),
                                self.chain_key) if violations is not None else None)
        return self._fleet.seal(self.query_id, batch_id, stats.session_seals, added).to_json()

    def _write(self, batch: DataFrame, txn: BatchTransactions, stats: Row, violations: DataFrame | None,
               end: dict | None) -> tuple[float, dict[str, float]]:
        """The batch's writes, in the order a re-run relies on; when the appends (and the read of
        the sessions ahead) ended, and each MERGE's seconds."""
        current, sessions = records.current(batch), records.sessions(batch)
        append_changes(txn, records.changes(batch), self.schema, self.replay)
        if violations is not None:
            append_violations(txn, violations, self.replay)
            if self._fleet is not None:
                self._fleet.violations_committed()
            self.recorded[txn.batch_id] = recorded_of(stats)
        # Sessions the tables hold at a later point (a replay into them, or a run behind one):
        # their rows stay as they are, and the sessions MERGE keeps their row too.
        behind = self._ahead.behind(sessions, end)
        if behind is not None:
            current = current.join(behind, ["topic", "session"], "left_anti")
            sessions = sessions.join(behind, ["topic", "session"], "left_anti")
        appended = time.perf_counter()
        # Known empty only until the first attempt to write them, whether or not it commits.
        empty, self._empty = frozenset(self._empty), set()
        tables = merge_live_tables(self.spark, txn, self.schema, current, sessions, closed=stats.closed > 0,
                                   empty=empty)
        if self._fleet is not None:
            self._fleet.sessions_committed()
        return appended, tables
