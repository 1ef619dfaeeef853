"""Where a run's metrics go: a Prometheus endpoint (``--metrics-port``) and a JSON-lines log
(``--metrics-log``), one of each per process so that they outlive a restarted query.

Both are opened before the query starts, so a port in use or a log that cannot be written is a
usage error (exit 2) and nothing runs.  The sinks hand in each batch's counts, the query listener
each progress report; the two meet by batch id (the sinks write a batch before Spark reports it).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import IO
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reconstructor.errors import UsageError
from reconstructor.metrics.batch_metrics import NO_COUNTS, BatchCounts, RunTotals, batch_metrics

PREFIX = "reconstructor_"


class MetricsExport:
    """The run's totals, served and logged.  Thread-safe: counts arrive from the batch's thread,
    progress from the listener's, scrapes from the endpoint's."""

    def __init__(self, log: IO[str] | None = None):
        self.totals = RunTotals()
        self.address: tuple[str, int] | None = None
        self._log = log
        self._server: WSGIServer | None = None
        self._counts: dict[int, BatchCounts] = {}
        self._reported: dict[str, int] = {}  # per query run, the last batch reported
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.registry.register(_TotalsCollector(self))

    @classmethod
    def open(cls, host: str, port: int | None, log_path: str | None) -> MetricsExport | None:
        """Listen on ``host:port`` and open ``log_path`` for appending (either may be unset); None
        when neither is set.  ``UsageError`` when the port or the file cannot be had."""
        if port is None and not log_path:
            return None
        if port is not None and not 0 < port < 65536:
            raise UsageError(f"--metrics-port {port} is not a port number (1-65535)")
        log = None
        if log_path:
            try:
                log = open(log_path, "a", encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"--metrics-log {log_path} cannot be opened for appending: "
                                 f"{exc.strerror or exc}") from None
        export = cls(log)
        if port is not None:
            try:
                server, _ = start_http_server(port, addr=host, registry=export.registry)
            except OSError as exc:
                export.close()
                raise UsageError(f"--metrics-port {port}: cannot listen on {host}:{port}: "
                                 f"{exc.strerror or exc}") from None
            export._server = server
            bound_host, bound_port = server.server_address[:2]
            export.address = (str(bound_host), int(bound_port))
        return export

    def count(self, batch_id: int, counts: BatchCounts) -> None:
        """What the sinks counted in a batch they wrote (a batch run again replaces its counts)."""
        with self._lock:
            self._counts[batch_id] = counts

    def progressed(self, progress: Mapping) -> None:
        """A batch's progress report: log it, then count it; once, however often it is handed in
        (the listener and the run's last look at a stopped query may both hand it in)."""
        with self._lock:
            batch_id, run = progress.get("batchId", -1), str(progress.get("runId"))
            if self._reported.get(run, -1) >= batch_id:
                return
            self._reported[run] = batch_id
            counts = self._counts.pop(batch_id, NO_COUNTS)
            for stale in [b for b in self._counts if b < batch_id]:  # attempts that never reported
                del self._counts[stale]
            batch = batch_metrics(progress, counts)
            if self._log is not None:
                self._log.write(batch.json_line())
                self._log.flush()
            self.totals.add(batch)

    def snapshot(self) -> RunTotals:
        with self._lock:
            t = self.totals
            return replace(t, sessions=dict(t.sessions), violations=dict(t.violations))

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            if self._log is not None:
                self._log.close()
                self._log = None


def _seconds(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class _TotalsCollector(Collector):
    """Renders the totals at scrape time, all from one snapshot."""

    def __init__(self, export: MetricsExport):
        self.export = export

    def collect(self) -> Iterator:
        t = self.export.snapshot()
        yield CounterMetricFamily(f"{PREFIX}batches", "Micro-batches the run has completed", value=t.batches)
        yield CounterMetricFamily(f"{PREFIX}records_read", "Kafka records the run has read",
                                  value=t.records_read)
        sessions = CounterMetricFamily(f"{PREFIX}sessions_written",
                                       "Session records written to the sessions table, by the status "
                                       "the batch left the session in", labels=["status"])
        for status, n in t.sessions.items():
            sessions.add_metric([status], n)
        yield sessions
        violations = CounterMetricFamily(f"{PREFIX}violations",
                                         "Rows appended to the violations table, by kind", labels=["kind"])
        for kind, n in sorted(t.violations.items()):
            violations.add_metric([kind], n)
        yield violations
        yield CounterMetricFamily(f"{PREFIX}resync_requests", "Resync requests sent to the resync topic "
                                  "for quarantined sessions", value=t.resync_requests)
        last = t.last
        if last is None:
            return
        yield GaugeMetricFamily(f"{PREFIX}last_batch_id", "Id of the last completed micro-batch",
                                value=last.batch_id)
        stamp = _seconds(last.timestamp)
        if stamp is not None:
            yield GaugeMetricFamily(f"{PREFIX}last_batch_timestamp_seconds",
                                    "When the last completed micro-batch started (Unix time)", value=stamp)
        yield GaugeMetricFamily(f"{PREFIX}batch_duration_seconds", "Duration of the last micro-batch",
                                value=last.duration_seconds)
        yield GaugeMetricFamily(f"{PREFIX}batch_records", "Records the last micro-batch read",
                                value=last.records_read)
        yield GaugeMetricFamily(f"{PREFIX}records_per_second", "Records per second the last micro-batch "
                                "processed", value=last.records_per_second)
        if last.kafka_lag is not None:
            lag = GaugeMetricFamily(f"{PREFIX}kafka_lag", "Offsets behind the broker's latest after the "
                                    "last micro-batch", labels=["topic", "partition"])
            for (topic, part), n in sorted(last.kafka_lag.items()):
                lag.add_metric([topic, str(part)], n)
            yield lag
        if last.state_rows is not None:
            yield GaugeMetricFamily(f"{PREFIX}state_rows", "Sessions held in the state store",
                                    value=last.state_rows)
        if last.state_memory_bytes is not None:
            yield GaugeMetricFamily(f"{PREFIX}state_memory_bytes", "Memory the state store uses",
                                    value=last.state_memory_bytes)
        if last.state_metrics:
            store = GaugeMetricFamily(f"{PREFIX}state_store_metric", "The state store provider's own "
                                      "metrics (RocksDB's when it is the provider)", labels=["name"])
            for name, value in last.state_metrics.items():
                store.add_metric([name], value)
            yield store
