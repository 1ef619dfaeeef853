"""Wire one streaming query: Kafka source, parse, stateful step, Delta sinks.

This is what ``reconstructor run`` and ``replay`` start; it holds no logic of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from reconstructor.errors import IntegrityViolationError, ReconstructorError
from reconstructor.schema import RowSchema
from reconstructor.spark.checkpoint import checkpoint_state
from reconstructor.spark.parse import parse_records
from reconstructor.spark.sinks import DeltaSinks
from reconstructor.spark.source import kafka_stream
from reconstructor.spark.stateful import reconstruct


@dataclass
class PipelineSettings:
    bootstrap_servers: str
    topic_pattern: str
    output: str
    checkpoint: str
    trigger: str = "available-now"  # or an interval such as "30 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    session_timeout: str = "1 hour"
    state_retention: str = "7 days"  # a silent session's state is removed after this
    await_snapshot: bool = False
    row_schema: str | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)
    query_name: str | None = None
    compact_every: str | None = None  # background OPTIMIZE of closed hours + VACUUM; None: off
    compact_grace: str = "15 minutes"
    vacuum_retention: str = "168 hours"
    vacuum_in_stream: bool = True
    # Replays: insert a row change only if the output lacks it; write any writer's tables, on a
    # checkpoint of their own (no committed batch), and are recorded as replays, not as the writer.
    dedupe_changes: bool = False


_UNITS_MS = {"ms": 1, "millisecond": 1, "s": 1000, "sec": 1000, "second": 1000, "m": 60_000,
             "min": 60_000, "minute": 60_000, "h": 3_600_000, "hour": 3_600_000, "d": 86_400_000,
             "day": 86_400_000}


def duration_ms(text: str) -> int:
    """'90 seconds', '30s', '1 hour', '2h' -> milliseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+?)s?\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS_MS:
        raise ValueError(f"not a duration: {text!r} (use e.g. '30 seconds', '10 minutes', '1 hour')")
    return int(float(m.group(1)) * _UNITS_MS[m.group(2).lower()])


_BACKGROUND: list = []
# Each started query's sinks, where a violation that stopped it is kept as a record (the query's
# failure reaches ``await_query`` only as text).
_SINKS_OF_QUERY: dict[str, DeltaSinks] = {}


def stop_background() -> None:
    """Stop the compaction threads that ``start`` began (after the query ended)."""
    while _BACKGROUND:
        _BACKGROUND.pop().stop()


def start(spark: SparkSession, settings: PipelineSettings) -> StreamingQuery:
    schema = RowSchema.load(settings.row_schema)
    sinks = DeltaSinks(spark, settings.output, schema, dedupe_changes=settings.dedupe_changes)
    # A writer is its checkpoint: refuse another writer's tables before Kafka is read.
    sinks.check_writer(checkpoint_state(spark, settings.checkpoint))
    sinks.start_creating_tables()
    raw = kafka_stream(
        spark,
        bootstrap_servers=settings.bootstrap_servers,
        topic_pattern=settings.topic_pattern,
        starting_offsets=settings.starting_offsets,
        max_offsets_per_trigger=settings.max_offsets_per_trigger,
        kafka_options=settings.kafka_options,
    )
    out = reconstruct(parse_records(raw, schema), schema,
                      session_timeout_ms=duration_ms(settings.session_timeout),
                      await_snapshot=settings.await_snapshot,
                      state_retention_ms=duration_ms(settings.state_retention))
    writer = (out.writeStream.foreachBatch(sinks.write_batch)
              .option("checkpointLocation", settings.checkpoint)
              .outputMode("append"))
    background = None
    if settings.compact_every:
        from reconstructor.spark.compaction import BackgroundCompactor, Compactor

        compactor = Compactor(spark, settings.output,
                              grace_s=duration_ms(settings.compact_grace) / 1000,
                              retention_hours=duration_ms(settings.vacuum_retention) / 3_600_000)
        background = BackgroundCompactor(compactor, duration_ms(settings.compact_every) / 1000,
                                         vacuum=settings.vacuum_in_stream)
    if settings.query_name:
        writer = writer.queryName(settings.query_name)
    if available_now(settings.trigger):
        writer = writer.trigger(availableNow=True)
    elif settings.trigger == "once":
        writer = writer.trigger(once=True)
    else:
        duration_ms(settings.trigger)
        writer = writer.trigger(processingTime=settings.trigger)
    query = _start(spark, writer, settings)
    sinks.set_query_id(query.id)  # the checkpoint's own id: the batches wait for it
    _SINKS_OF_QUERY[query.id] = sinks
    try:
        sinks.await_tables()  # created while the query planned and began its first batch
    except ReconstructorError:
        query.stop()
        raise
    if background is not None:  # its first run is now, so after the tables exist
        _BACKGROUND.append(background.start())
    return query


def _start(spark: SparkSession, writer, settings: PipelineSettings) -> StreamingQuery:
    if not available_now(settings.trigger):
        return writer.start()
    # With processing-time timeouts Spark would run no-data batches forever (they are how timeouts
    # fire), so an available-now query would never end. Without them it ends once caught up, and
    # timeouts still fire in every batch that has data. The query's session copies this setting
    # when it starts, so it is restored right after.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        return writer.start()
    finally:
        spark.conf.set(key, previous)


def available_now(trigger: str) -> bool:
    return trigger in ("available-now", "availableNow")


def await_query(query: StreamingQuery, *, poll_s: float = 0.5, on_progress=None) -> None:
    """Wait for the query; turn its failure into an IntegrityViolationError or ReconstructorError.

    ``on_progress`` is called with each new progress dict (for progress display).
    """
    from pyspark.errors import StreamingQueryException

    try:
        last_batch = None
        while not query.awaitTermination(poll_s):
            progress = _as_dict(query.lastProgress)
            if progress is not None and progress.get("batchId") != last_batch:
                last_batch = progress.get("batchId")
                if on_progress is not None:
                    on_progress(progress)
        query.awaitTermination()  # raises if the query failed
        final = _as_dict(query.lastProgress)
        if on_progress is not None and final is not None and final.get("batchId") != last_batch:
            on_progress(final)
    except StreamingQueryException as exc:
        sinks = _SINKS_OF_QUERY.get(query.id)
        if sinks is not None and sinks.violation is not None:
            raise IntegrityViolationError(sinks.violation) from None
        raise ReconstructorError(f"the streaming query failed: {_first_line(str(exc))}") from exc
    finally:
        _SINKS_OF_QUERY.pop(query.id, None)


def _as_dict(progress) -> dict | None:
    if progress is None or isinstance(progress, dict):
        return progress
    import json

    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return "unknown error"
