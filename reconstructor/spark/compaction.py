"""Hourly compaction: OPTIMIZE the closed ``hour`` partitions of ``row_changes``, then VACUUM.

An hour is closed once its end plus a grace period has passed; it is bin-packed only when it has
more files than ``min_files``, so a compacted hour is never rewritten again.  Appends only ever
add files to open hours, so compacting a closed hour never conflicts with the stream's commits:
that is why the stream can run it in a background thread of its own driver (the one writer that
S3's single-driver log store allows).  Each of its commits carries the table's fleet seal forward
(``carried_seal``).  ``current_rows`` and ``sessions`` are rewritten by MERGE
every batch; the stream compacts them between batches instead (``compact_live_tables``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.tables import (
    CURRENT_ROWS,
    HOUR_FORMAT,
    ROW_CHANGES,
    SESSIONS,
    TABLES,
    VIOLATIONS,
    table_path,
)
from reconstructor.core.compaction_schedule import wait_before_compaction
from reconstructor.settings import SAFE_VACUUM_RETENTION
from reconstructor.spark.carried_seal import sealed_writer
from reconstructor.spark.catalog import path_ref
from reconstructor.spark.compaction_mark import CompactionMark
from reconstructor.spark.transactions import spark_like

log = logging.getLogger(__name__)
_HOUR = re.compile(r"/hour=(\d{4}-\d{2}-\d{2}-\d{2})/")
DEFAULT_RETENTION_HOURS = SAFE_VACUUM_RETENTION / dt.timedelta(hours=1)


@dataclass
class HourReport:
    hour: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int


@dataclass
class CompactionReport:
    hours: list[HourReport] = field(default_factory=list)
    vacuumed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        out = [f"hour {h.hour}: {h.files_before} files ({h.bytes_before:,} B) -> "
               f"{h.files_after} files ({h.bytes_after:,} B)" for h in self.hours]
        if not self.hours:
            out.append("no closed hour needed compaction")
        if self.vacuumed:
            out.append(f"vacuumed {', '.join(self.vacuumed)}")
        out.append(f"took {self.seconds:.1f}s")
        return out


class Compactor:
    def __init__(self, spark: SparkSession, output: str, *, grace_s: float = 900,
                 retention_hours: float = DEFAULT_RETENTION_HOURS, min_files: int = 4,
                 lease_check: Callable[[], None] | None = None):
        self.spark = spark
        self.output = output
        self.grace_s = grace_s
        self.retention_hours = retention_hours
        self.min_files = min_files
        #: The writer lease's check (``WriterLease.check``): each OPTIMIZE commits, and each VACUUM
        #: deletes, only right after it finds the lease still this driver's.
        self.lease_check = lease_check or (lambda: None)

    def files_per_hour(self) -> dict[str, int]:
        """Files of each hour partition, from the Delta log only (no data is read)."""
        files = self.spark.read.format("delta").load(table_path(self.output, ROW_CHANGES)).inputFiles()
        counts: dict[str, int] = {}
        for f in files:
            m = _HOUR.search(f)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        return counts

    def closed_hours(self, now: dt.datetime | None = None) -> list[str]:
        now = now or dt.datetime.now(dt.UTC)
        closed = []
        for hour, count in sorted(self.files_per_hour().items()):
            start = dt.datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=dt.UTC)
            if start + dt.timedelta(hours=1, seconds=self.grace_s) <= now and count > self.min_files:
                closed.append(hour)
        return closed

    def optimize_hour(self, hour: str) -> HourReport:
        self.lease_check()
        path = table_path(self.output, ROW_CHANGES)
        table = DeltaTable.forPath(sealed_writer(self.spark, path), path)
        metrics = table.optimize().where(f"hour = '{hour}'").executeCompaction().collect()[0].metrics
        removed, added = metrics.filesRemoved, metrics.filesAdded
        return HourReport(hour, metrics.numFilesRemoved, self._files_in(hour),
                          int(removed.totalSize), int(added.totalSize))

    def _files_in(self, hour: str) -> int:
        return self.files_per_hour().get(hour, 0)

    def tables(self, names=TABLES) -> list[str]:
        """Those of the output's tables that exist (an output written before a table existed, or
        one no run has written yet, lacks some or all)."""
        return [name for name in names if DeltaTable.isDeltaTable(self.spark, table_path(self.output, name))]

    def vacuum(self, names=TABLES) -> list[str]:
        spark = self.spark
        if self.retention_hours < DEFAULT_RETENTION_HOURS:
            # Delta refuses a short retention unless told; the operator chose it explicitly
            # (--unsafe-vacuum-retention).  Told on a SparkSession of its own, so the one the
            # stream writes with keeps the check.
            spark = spark_like(self.spark)
            spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        done = []
        for name in self.tables(names):
            path = table_path(self.output, name)
            writer = sealed_writer(spark, path)  # VACUUM START and END are commits too
            self.lease_check()
            DeltaTable.forPath(writer, path).vacuum(self.retention_hours)
            done.append(name)
        return done

    def run(self, now: dt.datetime | None = None, vacuum: bool = True) -> CompactionReport:
        started = time.monotonic()
        report = CompactionReport()
        for hour in self.closed_hours(now):
            report.hours.append(self.optimize_hour(hour))
            log.info("compacted hour %s", hour)
        if vacuum:
            report.vacuumed = self.vacuum()
        report.seconds = time.monotonic() - started
        return report


def compact_live_tables(spark: SparkSession, output: str, min_files: int = 16) -> None:
    """OPTIMIZE current_rows and sessions when MERGEs have left many small files, and violations
    when its appends have (in-batch only)."""
    for name in (CURRENT_ROWS, SESSIONS, VIOLATIONS):
        path = table_path(output, name)
        detail = spark.sql(f"DESCRIBE DETAIL {path_ref(path)}").collect()[0]
        if detail.numFiles > min_files:
            DeltaTable.forPath(sealed_writer(spark, path), path).optimize().executeCompaction()


# A compaction that meets a concurrent commit is retried this many times, this long apart.
CONFLICT_RETRIES = 3
CONFLICT_WAIT_S = 1.0
# Delta's error classes for a transaction that lost to a concurrent commit: retrying is its advice.
_CONFLICTS = ("DELTA_CONCURRENT", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED", "ConcurrentModification")


def is_write_conflict(error: BaseException) -> bool:
    """Whether ``error`` is Delta's optimistic-concurrency conflict (safe to retry at once)."""
    return any(name in str(error) for name in _CONFLICTS)


def error_head(error: BaseException) -> str:
    return str(error).splitlines()[0][:300] if str(error) else type(error).__name__


class BackgroundCompactor:
    """Runs ``Compactor.run`` in a daemon thread of the streaming driver: once it is due, then every
    ``every_s``.  With a ``mark`` (the output's last compaction) it is due ``every_s`` after the last
    compaction of any run, so a run every few minutes does not OPTIMIZE and VACUUM at each start,
    and its exit never waits for a compaction that was not due; an output with no mark yet (its
    first run) starts the schedule, recording the mark now, and compacts an interval later.
    Without a ``mark``, at the start (``compact``, and tests)."""

    def __init__(self, compactor: Compactor, every_s: float, vacuum: bool = True,
                 mark: CompactionMark | None = None, clock: Callable[[], dt.datetime] | None = None):
        self.compactor = compactor
        self.vacuum = vacuum
        self.every_s = every_s
        self.mark = mark
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._stop = threading.Event()
        self._running = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reconstructor-compaction", daemon=True)
        self.last_report: CompactionReport | None = None
        self.runs = 0
        self.hours_compacted = 0
        self.windows: list[tuple[float, float]] = []  # (start, end) epoch seconds of each run

    def start(self) -> BackgroundCompactor:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether a compaction is in progress."""
        return self._running.is_set()

    def stop(self) -> None:
        """Start no new compaction and return once the one in progress, if any, has finished: an
        OPTIMIZE or VACUUM cut short by the driver's exit would leave its work to the next run."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        if self.mark is not None:
            last, now = self.mark.last(), self._clock()
            if last is None:  # the first run of the schedule: it starts now (new tables need none)
                self.mark.record(now)
            due_in = wait_before_compaction(last or now, now, dt.timedelta(seconds=self.every_s))
            if self._stop.wait(due_in.total_seconds()):
                return
        while not self._stop.is_set():
            self._running.set()
            try:
                self.run_once()
            finally:
                self._running.clear()
            if self._stop.wait(self.every_s):
                return

    def run_once(self) -> None:
        """One compaction run (as the loop makes them): a Delta write conflict is retried at once."""
        for attempt in range(CONFLICT_RETRIES + 1):
            error = self._attempt()
            if error is None:
                return
            if attempt == CONFLICT_RETRIES or not is_write_conflict(error) or self._stop.wait(CONFLICT_WAIT_S):
                break
            # The stream committed to the same table meanwhile (its first batch records its writer
            # on every table's properties): Delta asks for a retry, which finds the work left.
            log.info("compaction met a concurrent commit, retrying: %s", error_head(error))
        if error is not None:
            log.warning("compaction failed, will retry: %s", error_head(error))

    def _attempt(self) -> Exception | None:
        """One compaction run; its failure, if any (a failed compaction is never fatal)."""
        started = time.time()
        try:
            self.last_report = self.compactor.run(vacuum=self.vacuum)
            self.runs += 1
            self.hours_compacted += len(self.last_report.hours)
            self.windows.append((started, time.time()))
            if self.mark is not None:
                self.mark.record(self._clock())
            for line in self.last_report.lines():
                log.info("compaction: %s", line)
        except Exception as exc:  # noqa: BLE001 - retried now (a conflict) or next time
            return exc
        return None
