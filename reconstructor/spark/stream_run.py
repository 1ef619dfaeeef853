"""A run or replay's stream, to its end: the query under the output's writer lease, started again
from its checkpoint after each failure the restart policy allows, stopped by SIGINT and SIGTERM.

The command line validates the settings, takes the lease and builds the SparkSession; this is the
one function it then calls (``run_stream``), with typed settings, and it returns a typed outcome
(``StreamOutcome``).  It prints nothing itself: its lines go to ``tell`` and each batch's progress
to ``on_progress``, which the command line renders.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from reconstructor.core.step_spec import StepStart
from reconstructor.errors import ReconstructorError, StoppedBySignal
from reconstructor.failures import explain
from reconstructor.metrics.export import MetricsExport
from reconstructor.settings import Settings
from reconstructor.spark import driver_jvm
from reconstructor.spark.restarts import Restarts, StopSignals, transient
from reconstructor.spark.sinks.stats import Recorded
from reconstructor.spark.sinks.stops import RunAgain

#: Each new progress report, with what the query's batches wrote to ``violations`` (by batch id).
OnProgress = Callable[[dict, Mapping[int, Recorded]], None]


@dataclass(frozen=True)
class StreamOutcome:
    """How a stream that ended without an error ended: what each of its batches wrote to
    ``violations`` (by batch id, across restarts), and, when the run is in quarantine mode or
    recorded anything, how many sessions the ``sessions`` table holds quarantined now."""

    recorded: Mapping[int, Recorded]
    quarantined_now: int | None


def run_stream(spark: SparkSession, cfg: Settings, *, replay: bool, restarts: Restarts, signals: StopSignals,
               lease: Any, on_progress: OnProgress, tell: Callable[[str], None],
               query_ended: Callable[[], None] | None = None, metrics: MetricsExport | None = None,
               step_start: StepStart | None = None) -> StreamOutcome:
    """The query, started again from its checkpoint after each failure ``restarts`` allows, to its
    end.  ``lease``: the ``contract.lease.WriterLease`` held, or None where no lease is kept;
    ``query_ended`` is told each time a query stopped, before anything else is told.  Raises the
    failure the policy refuses, ``StoppedBySignal`` on a signal (never restarted)."""
    recorded: dict[int, Recorded] = {}  # batch id -> what it wrote to violations, across restarts
    listener = None
    if metrics is not None:  # one listener for the run: restarted queries report to it too
        from reconstructor.metrics.listener import MetricsListener

        listener = MetricsListener(metrics)
        spark.streams.addListener(listener)
    try:
        while True:
            try:
                again = _query(spark, cfg, restarts, on_progress, recorded, replay, metrics, signals, lease,
                               step_start, tell, query_ended)
                if again is None:
                    break
                tell(str(again))  # not a failure: the batch runs again from the checkpoint
            except StoppedBySignal:  # as asked: never restarted, whatever became of the JVM
                raise
            except Exception as exc:  # the policy decides; what it refuses is re-raised
                if signals.request.requested and transient(exc):  # never a restart after a signal
                    raise signals.request.stopped() from None
                status = driver_jvm.gone(spark, exc)
                if status is not None:  # nothing to restart on
                    raise ReconstructorError(driver_jvm.gone_line(status)) from exc
                delay = restarts.after(exc)
                if delay is None:
                    raise
                tell(restarts.line(delay, explain(exc, cfg)))
                time.sleep(delay.total_seconds())
        quarantined = _quarantined_now(spark, cfg) if cfg.policy().quarantine or recorded else None
        return StreamOutcome(dict(recorded), quarantined)
    finally:
        # A caller that runs commands in one process keeps no stale listener (a JVM gone keeps none).
        if listener is not None and driver_jvm.exit_status(spark) is None:
            spark.streams.removeListener(listener)


def _query(spark: SparkSession, cfg: Settings, restarts: Restarts, on_progress: OnProgress,
           recorded: dict[int, Recorded], replay: bool, metrics: MetricsExport | None, signals: StopSignals,
           lease: Any, step_start: StepStart | None, tell: Callable[[str], None],
           query_ended: Callable[[], None] | None) -> RunAgain | None:
    """One query to its end; returns why it is to start again from its checkpoint, else None."""
    from reconstructor.spark.engines import with_engine
    from reconstructor.spark.nothing_new import nothing_new
    from reconstructor.spark.pipeline import start

    cfg = with_engine(spark, cfg)  # before the fingerprint, which names it
    if not replay and (line := nothing_new(spark, cfg, dt.datetime.now(dt.UTC))) is not None:
        tell(line)
        return None
    running = start(spark, cfg, replay=replay, on_counts=metrics.count if metrics is not None else None,
                    lease_check=lease.check if lease is not None else None,
                    lease_token=lease.token if lease is not None else None, step_start=step_start)

    def progressed(p: dict) -> None:
        restarts.progressed(p)
        on_progress(p, running.sinks.recorded)

    try:
        return running.await_termination(on_progress=progressed, stop=signals.request)
    finally:
        running.stop()
        if query_ended is not None:
            query_ended()
        recorded.update(running.sinks.recorded)
        if metrics is not None:  # the listener is told asynchronously: the last batches may be untold
            for p in running.recent_progress():
                metrics.progressed(p)
        if running.left_writing and lease is not None:  # last: it may end the driver's JVM
            lease_under_writes(spark, lease, signalled=signals.request.requested)


def lease_under_writes(spark: SparkSession, lease: Any, *, signalled: bool) -> None:
    """A batch of this driver still writing after the query stopped may yet commit while the
    driver's JVM runs, so the lease is not given up under it.  A run stopped by a signal ends that
    JVM, after which nothing of it can start a commit, and its lease is then released as usual (the
    next scheduled run need not wait out a TTL); otherwise, or when the JVM is not this process's to
    end (``spark-submit`` started it), the lease is left to expire."""
    if not (signalled and driver_jvm.stop(spark)):
        lease.keep()


def _quarantined_now(spark: SparkSession, cfg: Settings) -> int:
    """The sessions the ``sessions`` table holds quarantined."""
    from reconstructor.contract.tables import SESSIONS, table_path
    from reconstructor.core.session_status import SessionStatus

    return int(spark.read.format("delta").load(table_path(cfg.need("output"), SESSIONS))
               .filter(f"status = '{SessionStatus.QUARANTINED.value}'").count())
