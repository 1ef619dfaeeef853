"""Wire one streaming query: Kafka source, parse, stateful step, Delta sinks.

This is what ``reconstructor run`` and ``replay`` start; it holds no logic of its own.  ``start``
returns a ``RunningPipeline``: the query with its sinks and its compactor, awaited and stopped as one.
"""

from __future__ import annotations

import datetime as dt
import json

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from reconstructor.config import AVAILABLE_NOW, Config
from reconstructor.errors import IntegrityViolationError, ReconstructorError, error_line
from reconstructor.schema import RowSchema
from reconstructor.spark.checkpoint import checkpoint_state
from reconstructor.spark.compaction import BackgroundCompactor, Compactor
from reconstructor.spark.evolution import evolve_tables
from reconstructor.spark.parse import parse_records
from reconstructor.spark.sinks import DeltaSinks
from reconstructor.spark.source import kafka_stream
from reconstructor.spark.stateful import reconstruct


def _ms(duration: dt.timedelta) -> int:
    return duration // dt.timedelta(milliseconds=1)


class RunningPipeline:
    """A started query and what belongs to it: its sinks, where a violation that stopped it is
    kept as a record (the query's failure carries it only as text), and the compactor that runs
    beside it (or None)."""

    def __init__(self, query: StreamingQuery, sinks: DeltaSinks,
                 compactor: BackgroundCompactor | None = None):
        self.query = query
        self.sinks = sinks
        self.compactor = compactor

    def await_termination(self, *, poll_s: float = 0.5, on_progress=None) -> None:
        """Wait for the query; turn its failure into an IntegrityViolationError or ReconstructorError.

        ``on_progress`` is called with each new progress dict (for progress display).
        """
        query = self.query
        try:
            last_batch = None
            while not query.awaitTermination(poll_s):
                progress = self.last_progress()
                if progress is not None and progress.get("batchId") != last_batch:
                    last_batch = progress.get("batchId")
                    if on_progress is not None:
                        on_progress(progress)
            query.awaitTermination()  # raises if the query failed
            final = self.last_progress()
            if on_progress is not None and final is not None and final.get("batchId") != last_batch:
                on_progress(final)
        except StreamingQueryException as exc:
            if self.sinks.violation is not None:
                raise IntegrityViolationError(self.sinks.violation) from None
            raise ReconstructorError(f"the streaming query failed: {error_line(exc, limit=500)}") from exc

    def stop(self) -> None:
        """Stop the query (if still running), then the compactor, waiting for a run in progress."""
        try:
            self.query.stop()
        finally:
            if self.compactor is not None:
                self.compactor.stop()

    def last_progress(self) -> dict | None:
        return progress_dict(self.query.lastProgress)

    def recent_progress(self) -> list[dict]:
        return [progress_dict(p) for p in self.query.recentProgress]


def start(spark: SparkSession, cfg: Config, *, query_name: str | None = None,
          dedupe_changes: bool = False, vacuum_in_stream: bool = True, on_counts=None) -> RunningPipeline:
    """Start the query ``cfg`` describes (and its compactor, when ``cfg.compact_every`` is set).

    Replays pass ``dedupe_changes``: they insert a row change only if the output lacks it, write
    any writer's tables on a checkpoint of their own (no committed batch), and are recorded as
    replays, not as the writer.  ``on_counts`` is told each written batch's ``BatchCounts`` (metrics).
    """
    schema = RowSchema.load(cfg.row_schema)
    policy = cfg.policy()
    sinks = DeltaSinks(spark, cfg.output, schema, dedupe_changes=dedupe_changes, on_counts=on_counts)
    # A writer is its checkpoint: refuse another writer's tables before Kafka is read.
    sinks.check_writer(checkpoint_state(spark, cfg.checkpoint))
    # Existing tables take the row schema's new columns; a change that would lose data is refused.
    evolve_tables(spark, cfg.output, schema)
    sinks.start_creating_tables()
    raw = kafka_stream(
        spark,
        bootstrap_servers=cfg.bootstrap_servers,
        topic_pattern=cfg.topic_pattern,
        starting_offsets=cfg.starting_offsets,
        max_offsets_per_trigger=cfg.max_offsets_per_trigger,
        kafka_options=dict(cfg.kafka),
    )
    out = reconstruct(parse_records(raw, schema, keep_values=policy.quarantine), schema,
                      session_timeout_ms=_ms(cfg.session_timeout),
                      await_snapshot=cfg.await_snapshot,
                      state_retention_ms=_ms(cfg.state_retention),
                      policy=policy)
    writer = (out.writeStream.foreachBatch(sinks.write_batch)
              .option("checkpointLocation", cfg.checkpoint)
              .outputMode("append"))
    background = None
    if cfg.compact_every is not None:
        compactor = Compactor(spark, cfg.output, grace_s=cfg.compact_grace.total_seconds(),
                              retention_hours=cfg.vacuum_retention / dt.timedelta(hours=1))
        background = BackgroundCompactor(compactor, cfg.compact_every.total_seconds(),
                                         vacuum=vacuum_in_stream)
    if query_name:
        writer = writer.queryName(query_name)
    if available_now(cfg.trigger):
        writer = writer.trigger(availableNow=True)
    elif cfg.trigger == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=f"{_ms(cfg.trigger)} milliseconds")
    query = _start(spark, writer, cfg)
    sinks.set_query_id(query.id)  # the checkpoint's own id: the batches wait for it
    try:
        sinks.await_tables()  # created while the query planned and began its first batch
    except ReconstructorError:
        query.stop()
        raise
    if background is not None:  # its first run is now, so after the tables exist
        background.start()
    return RunningPipeline(query, sinks, background)


def _start(spark: SparkSession, writer, cfg: Config) -> StreamingQuery:
    if not available_now(cfg.trigger):
        return writer.start()
    # With processing-time timeouts Spark would run no-data batches forever (they are how timeouts
    # fire), so an available-now query would never end. Without them it ends once caught up, and
    # timeouts still fire in every batch that has data. The query copies this SparkSession setting
    # when it starts, so it is restored right after.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        return writer.start()
    finally:
        spark.conf.set(key, previous)


def available_now(trigger) -> bool:
    return trigger in (AVAILABLE_NOW, "availableNow")


def progress_dict(progress) -> dict | None:
    """A query's progress report as a dict, whichever form this PySpark gives it in."""
    if progress is None or isinstance(progress, dict):
        return progress
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)
