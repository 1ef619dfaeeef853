"""Wire one streaming query: Kafka source, parse, stateful step, Delta sinks.

This is what ``reconstructor run`` and ``replay`` start; it holds no logic of its own.  ``start``
returns a ``RunningPipeline``: the query with its sinks and its compactor, awaited and stopped as one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import threading
import time
from dataclasses import replace

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.chain import ChainKey
from reconstructor.core.seed import NO_SEEDS
from reconstructor.core.step_spec import NO_START, StepStart
from reconstructor.errors import IntegrityViolationError, ReconstructorError, StoppedBySignal, error_line
from reconstructor.settings import Settings
from reconstructor.settings.durations import milliseconds
from reconstructor.spark.catalog import comment_tables, register_tables
from reconstructor.spark.chain_seeds import chain_seeds
from reconstructor.spark.checkpoint import checkpoint_state, record_output
from reconstructor.spark.compaction import BackgroundCompactor, Compactor
from reconstructor.spark.compaction_mark import CompactionMark
from reconstructor.spark.data_loss import KafkaLossCheck, LossRegistry
from reconstructor.spark.engines import parse_for, reconstruct_with, record_engine, refuse_other_engine, with_engine
from reconstructor.spark.evolution import evolve_tables
from reconstructor.spark.jvm_gateway import jvm_of
from reconstructor.spark.nothing_new import record_start
from reconstructor.spark.restarts import STOP_TIMEOUT, StopRequest, StopStep
from reconstructor.spark.seal_rows import seal_sessions
from reconstructor.spark.session_seeds import keep_seeds, kept_seeds
from reconstructor.spark.sinks import DeltaSinks
from reconstructor.spark.sinks.resync import ResyncRequests
from reconstructor.spark.sinks.stops import RunAgain
from reconstructor.spark.source import kafka_stream
from reconstructor.spark.transactions import side_by_side


def _seal_existing_rows(spark: SparkSession, cfg: Settings) -> None:
    """A keyed output's ``sessions`` rows from before it was sealed take their seals, once."""
    if cfg.chain_key:
        sealed = seal_sessions(spark, cfg.need("output"), ChainKey(cfg.chain_key))
        if sealed:
            logging.getLogger(__name__).info("sealed %d sessions rows written before the output was sealed", sealed)


class RunningPipeline:
    """A started query and what belongs to it: its sinks, where a violation that stopped it is
    kept as a record (the query's failure carries it only as text), and the compactor that runs
    beside it (or None)."""

    def __init__(self, query: StreamingQuery, sinks: DeltaSinks,
                 compactor: BackgroundCompactor | None = None):
        self.query = query
        self.sinks = sinks
        self.compactor = compactor
        self._stopped = False
        self._signals: StopRequest | None = None  # the stop request the query is awaited with
        #: After ``stop``: a batch or a compaction of this driver was still writing when it returned,
        #: and may yet commit; its writer lease must then be left to expire, not released.
        self.left_writing = False

    def await_termination(self, *, poll_s: float = 0.5, on_progress=None,
                          stop: StopRequest | None = None) -> RunAgain | None:
        """Wait for the query; turn its failure into an IntegrityViolationError or ReconstructorError.
        Returns why the query is to start again from its checkpoint (``RunAgain``), else None.

        ``on_progress`` is called with each new progress dict (for progress display).  ``stop`` (a
        ``restarts.StopRequest``) is how a signal reaches the loop: it then waits for a batch in
        flight up to ``restarts.STOP_GRACE`` (a second signal cuts that short), stops the query and
        raises ``StoppedBySignal``; a failure after a signal is reported as that stop too.
        """
        query = self.query
        if stop is not None:
            self._signals = stop
            stop.awaiting = True
        try:
            last_batch = None

            def report(progress) -> None:
                nonlocal last_batch
                if progress is not None and progress.get("batchId") != last_batch:
                    last_batch = progress.get("batchId")
                    if stop is not None:
                        stop.progressed(progress)
                    if on_progress is not None:
                        on_progress(progress)

            while not query.awaitTermination(poll_s):  # type: ignore[arg-type]  # pyspark takes float seconds, typed int
                report(self.last_progress())
                if stop is not None and stop.requested:
                    raise self._stop_on(stop, report)
            if stop is not None and stop.requested:
                raise self._stop_on(stop, report)
            query.awaitTermination()  # raises if the query failed
            report(self.last_progress())
        except StreamingQueryException as exc:
            if self.sinks.violation is not None:
                raise IntegrityViolationError(self.sinks.violation) from None
            if self.sinks.run_again is not None:
                return self.sinks.run_again
            if self.sinks.stopped_by is not None:
                raise self.sinks.stopped_by from None
            if stop is not None and stop.requested:  # the engine stopped under the signal
                raise stop.stopped(abandoned=True) from None
            raise ReconstructorError(f"the streaming query failed: {error_line(exc, limit=500)}") from exc
        except StoppedBySignal:
            raise
        except Exception:
            if stop is not None and stop.requested:  # e.g. the driver JVM ended on the signal too
                raise stop.stopped(abandoned=True) from None
            raise
        finally:
            if stop is not None and not stop.requested:  # ended without a signal: one now ends the run
                stop.awaiting = False
        return None

    def _stop_on(self, stop: StopRequest, report) -> StoppedBySignal:
        """After a stop signal: wait for the batch in flight (if any) up to the grace, stop the query
        (bounded), and return the error that ends the run.  The query's own failure meanwhile is
        raised as it is (a violation is still exit 3)."""
        at_signal = (self.last_progress() or {}).get("batchId")
        while True:
            progress = self.last_progress()
            report(progress)
            step = stop.next_step(at_signal, progress, bool(self.query.status.get("isTriggerActive")),
                                  time.monotonic())
            if step is not StopStep.WAIT:
                break
            if self.query.awaitTermination(0.1):  # type: ignore[arg-type]  # pyspark takes float seconds, typed int
                step = StopStep.STOP
                break
        abandoned = step is StopStep.ABANDON
        try:
            if abandoned:
                _mute_engine(self.sinks.spark)
            self.stop(within=STOP_TIMEOUT.total_seconds(), stop=stop)
        except Exception:  # noqa: BLE001 - the engine went away under the signal: nothing to stop
            abandoned = True
        return stop.stopped(abandoned=abandoned)

    def stop(self, *, within: float | None = None, stop: StopRequest | None = None) -> None:
        """Stop the query (if still running), then the compactor, waiting for a run in progress.

        With ``within`` (seconds), as after a signal: each wait is bounded, and a second signal
        (``stop.at_once``) ends it; what is left is cut short by the process's exit, which the
        checkpoint and the Delta transactions make safe.  Once stopped, a further call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        if within is None and self._signals is not None and self._signals.requested:
            within, stop = STOP_TIMEOUT.total_seconds(), self._signals
        if within is None:
            try:
                self.query.stop()
            finally:
                if self.compactor is not None:
                    self.compactor.stop()
            return
        try:
            _bounded(self.query.stop, within, stop)
        finally:
            if self.compactor is not None:
                _bounded(self.compactor.stop, within, stop)
            # The batch's own threads outlive the query's stop: wait for them as long as the stop.
            self.left_writing = (self.sinks.writing(0.0 if stop is not None and stop.at_once else within)
                                 or (self.compactor is not None and self.compactor.running))

    def last_progress(self) -> dict | None:
        return progress_dict(self.query.lastProgress)

    def recent_progress(self) -> list[dict]:
        return [d for p in self.query.recentProgress if (d := progress_dict(p)) is not None]


def _mute_engine(spark) -> None:
    """Before a query is stopped under its batch in flight: the engine reports the interrupted
    batch (log4j's errors, and the stream thread's uncaught error on the JVM's stderr, with Java
    stack traces) though the run's line says it all; unless ``-v``, the driver JVM says nothing more."""
    if logging.getLogger().isEnabledFor(logging.INFO):  # -v
        return
    jvm = jvm_of(spark)
    jvm.org.apache.logging.log4j.core.config.Configurator.setAllLevels(
        "", jvm.org.apache.logging.log4j.Level.OFF)
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))


def _bounded(call, seconds: float, stop: StopRequest | None = None) -> None:
    """``call()`` in a daemon thread, waited for ``seconds`` at most (less after a second signal);
    its failure is re-raised."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    worker = threading.Thread(target=target, name="reconstructor-stop", daemon=True)
    worker.start()
    deadline = time.monotonic() + seconds
    while worker.is_alive() and time.monotonic() < deadline and not (stop is not None and stop.at_once):
        worker.join(0.1)
    if failure:
        raise failure[0]


def start(spark: SparkSession, cfg: Settings, *, query_name: str | None = None,
          replay: bool = False, vacuum_in_stream: bool = True, on_counts=None,
          lease_check=None, lease_token: str | None = None,
          step_start: StepStart | None = None) -> RunningPipeline:
    """Start the query ``cfg`` describes (and its compactor, when ``cfg.compact_every`` is set).

    A replay (``replay``) inserts a row change only if the output lacks it, may write any writer's
    tables on a checkpoint of its own (no committed batch), and is recorded as a replay, not as
    the writer.  ``on_counts`` is told each written batch's ``BatchCounts`` (metrics).  A replay's
    ``step_start`` (``core.step_spec.StepStart``) names the sessions it seeds from the tables
    (``core.seed``), kept in its checkpoint so that a run on that checkpoint starts from those that
    still apply, and whether it awaits each session's snapshot.
    """
    cfg = with_engine(spark, cfg)  # unset: the checkpoint's, or the default for a new one
    schema = RowSchema.load(cfg.row_schema)
    policy = cfg.policy()
    # Quarantine mode goes on past a DATA_LOSS: the losses recorded so far reach the state function.
    registry = LossRegistry(spark, cfg.need("checkpoint")) if policy.quarantine else None
    sinks = DeltaSinks(spark, cfg.need("output"), schema, replay=replay, on_counts=on_counts,
                       loss_check=KafkaLossCheck(spark, cfg.need("checkpoint"), cfg.need("output"),
                                                 cfg.need("bootstrap_servers"), cfg.kafka),
                       loss_registry=registry, lease_check=lease_check, lease_token=lease_token,
                       chain_key=ChainKey(cfg.chain_key) if cfg.chain_key else None,
                       resync=None if replay or not cfg.resync_topic else ResyncRequests(
                           spark, cfg.resync_topic, cfg.need("bootstrap_servers"), cfg.resync_interval,
                           dict(cfg.kafka)))

    def checks():
        """What must hold before anything is written, and the step's start; the checkpoint read."""
        # A writer is its checkpoint: refuse another writer's tables before Kafka is read.
        checkpoint = checkpoint_state(spark, cfg.need("checkpoint"))
        sinks.check_writer(checkpoint)
        refuse_other_engine(spark, checkpoint, cfg.engine)
        # Existing tables take the row schema's new columns; a change that would lose data is refused.
        evolve_tables(spark, cfg.need("output"), schema)
        _seal_existing_rows(spark, cfg)
        if cfg.catalog:  # the names need the tables: created (or found) first
            sinks.start_creating_tables()
            sinks.await_tables()
            _catalog(spark, cfg, schema, replay)
        given = step_start if step_start is not None else NO_START
        if replay:  # in its own checkpoint only now, once the checks let it write there
            keep_seeds(spark, cfg.need("checkpoint"), given.session_seeds)
            return checkpoint, given
        return checkpoint, replace(given, session_seeds=kept_seeds(spark, cfg.need("checkpoint")) or NO_SEEDS)

    # The parse's plan (its SQL parsed and analysed: about two seconds of the driver's in a new JVM)
    # reads nothing, so it is built beside the checks, which mostly wait on the output's storage;
    # a check's failure is the one raised.
    (checkpoint, step_start), parsed = side_by_side(spark, checks, lambda: _parsed(spark, cfg, schema, replay))
    out = _reconstructed(spark, cfg, schema, registry, replay, step_start, parsed)
    # Once its jar was found, so that a checkpoint records a usable engine.
    side_by_side(spark, lambda: record_engine(spark, checkpoint, cfg.engine),
                 lambda: record_output(spark, checkpoint, cfg.need("output")))
    writer = _writer(out, sinks, cfg, query_name)
    background = _compactor(spark, cfg, vacuum_in_stream, lease_check)
    query = _start(spark, writer, cfg)
    if not cfg.catalog:
        # Beside the query's planning and its first batch, which wait on the executors as much as on
        # the driver, rather than beside the parse's plan, which is the driver's alone: on a few cores
        # the two slowed each other.  The first write waits for the tables.
        sinks.start_creating_tables()
    sinks.set_query_id(query.id)  # the checkpoint's own id: the batches wait for it
    try:
        sinks.await_tables()  # created while the query planned and began its first batch
    except ReconstructorError:
        query.stop()
        raise
    if background is not None:  # its first run is now, so after the tables exist
        background.start()
    record_start(spark, cfg, "replay" if replay else "run")  # a later run with nothing new may end early
    return RunningPipeline(query, sinks, background)


def _catalog(spark: SparkSession, cfg: Settings, schema: RowSchema, replay: bool) -> None:
    """``--catalog``: the writer documents tables an earlier release created, then every driver
    registers the names (a replay into a new output too, with ``--catalog-replace``)."""
    if cfg.catalog is None:
        return
    if not replay:
        comment_tables(spark, cfg.need("output"), schema)
    for name in register_tables(spark, cfg.catalog, cfg.need("output"), schema, replace=cfg.catalog_replace):
        print(f"reconstructor: registered {name} in the catalog", file=sys.stderr, flush=True)


def _parsed(spark: SparkSession, cfg: Settings, schema: RowSchema, replay: bool) -> DataFrame:
    """The Kafka source's records, parsed as ``cfg.engine``'s step takes them (nothing is read)."""
    raw = kafka_stream(
        spark,
        bootstrap_servers=cfg.need("bootstrap_servers"),
        topic_pattern=cfg.need("topic_pattern"),
        starting_offsets=cfg.starting_offsets,
        max_offsets_per_trigger=cfg.max_offsets_per_trigger,
        kafka_options=dict(cfg.kafka),
        assign_offsets=replay,  # a replay reads exactly the partitions its plan names
    )
    return parse_for(cfg.engine, raw, schema, keep_values=cfg.policy().quarantine)


def _reconstructed(spark: SparkSession, cfg: Settings, schema: RowSchema, registry: LossRegistry | None,
                   replay: bool, step_start: StepStart, parsed: DataFrame) -> DataFrame:
    """The records the stateful step emits: the ``parsed`` records, each session rebuilt."""
    start = replace(step_start,
                    losses=registry.by_partition() if registry is not None else {},
                    chain_seeds=chain_seeds(spark, cfg.need("output"), cfg.need("topic_pattern")) if replay else {})
    return reconstruct_with(cfg.engine, parsed, cfg.step_spec(schema), start)


def _writer(out: DataFrame, sinks: DeltaSinks, cfg: Settings, query_name: str | None):
    """The stream's writer: each micro-batch to the sinks, under the configured trigger."""
    writer = (out.writeStream.foreachBatch(sinks.write_batch)
              .option("checkpointLocation", cfg.checkpoint)
              .outputMode("append"))
    if query_name:
        writer = writer.queryName(query_name)
    if cfg.trigger.available_now:
        return writer.trigger(availableNow=True)
    if cfg.trigger.once:
        return writer.trigger(once=True)
    if cfg.trigger.interval is None:
        raise ValueError(f"trigger {cfg.trigger} is neither once, available-now nor an interval")
    return writer.trigger(processingTime=f"{milliseconds(cfg.trigger.interval)} milliseconds")


def _compactor(spark: SparkSession, cfg: Settings, vacuum: bool, lease_check=None) -> BackgroundCompactor | None:
    """The in-stream compactor, when ``compact_every`` is set, under the writer lease's check."""
    if cfg.compact_every is None:
        return None
    compactor = Compactor(spark, cfg.need("output"), grace_s=cfg.compact_grace.total_seconds(),
                          retention_hours=cfg.vacuum_retention / dt.timedelta(hours=1), lease_check=lease_check)
    return BackgroundCompactor(compactor, cfg.compact_every.total_seconds(), vacuum=vacuum,
                               mark=CompactionMark(spark, cfg.need("output")))


def _start(spark: SparkSession, writer, cfg: Settings) -> StreamingQuery:
    if not cfg.trigger.available_now:
        return writer.start()
    # With processing-time timeouts Spark would run no-data batches forever (they are how timeouts
    # fire), so an available-now query would never end. Without them it ends once caught up, and
    # timeouts still fire in every batch that has data. The query copies this SparkSession setting
    # when it starts, so it is restored right after.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    previous = spark.conf.get(key, "true") or "true"
    spark.conf.set(key, "false")
    try:
        return writer.start()
    finally:
        spark.conf.set(key, previous)


def progress_dict(progress) -> dict | None:
    """A query's progress report as a dict, whichever form this PySpark gives it in."""
    if progress is None or isinstance(progress, dict):
        return progress
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)
