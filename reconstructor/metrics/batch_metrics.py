"""What a fleet operator watches, per micro-batch: one ``BatchMetrics`` from Spark's progress report
and the sinks' counts, folded into the run's ``RunTotals``.

Pure: the progress arrives as the dict Spark's JSON gives, the counts as the sinks computed them in
their one aggregation; the Prometheus endpoint and the JSON log only render what is here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconstructor.core.session_status import SessionStatus
from reconstructor.core.violations import ViolationKind

STATUSES = tuple(s.value for s in SessionStatus)
VIOLATION_KINDS = tuple(k.value for k in ViolationKind)


@dataclass(frozen=True)
class BatchCounts:
    """What one batch wrote, counted by the sinks: session records by the status they leave the
    session in, and rows appended to ``violations`` by kind."""

    sessions: Mapping[str, int] = field(default_factory=dict)
    violations: Mapping[str, int] = field(default_factory=dict)
    #: Resync requests the batch sent to ``--resync-topic``.
    resync_requests: int = 0


NO_COUNTS = BatchCounts()


def _offsets(value) -> dict[tuple[str, int], int]:
    """A source's offsets (``{"topic": {"0": 42}}``, as JSON text or parsed) by (topic, partition)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for topic, parts in value.items():
        if isinstance(parts, dict):
            for part, offset in parts.items():
                if str(part).lstrip("-").isdigit() and isinstance(offset, int):
                    out[(topic, int(part))] = offset
    return out


def kafka_lag(progress: Mapping) -> dict[tuple[str, int], int] | None:
    """Offsets behind the broker per (topic, partition) once the batch is done: the latest offset
    Spark saw when it planned the batch minus the batch's end offset.  None when no source reports
    a latest offset (a batch Spark planned without asking the broker)."""
    lag: dict[tuple[str, int], int] = {}
    seen = False
    for source in progress.get("sources") or []:
        latest = _offsets(source.get("latestOffset"))
        if not latest:
            continue
        seen = True
        end = _offsets(source.get("endOffset"))
        for tp, offset in latest.items():
            if tp in end:
                lag[tp] = max(0, offset - end[tp])
    return lag if seen else None


def _number(value, default: float = 0.0) -> float:
    """A progress number; Spark leaves NaN and infinite rates out of its JSON."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class BatchMetrics:
    """One micro-batch as the operator sees it."""

    batch_id: int
    timestamp: str | None
    records_read: int
    duration_seconds: float
    records_per_second: float
    kafka_lag: dict[tuple[str, int], int] | None
    sessions: dict[str, int]
    violations: dict[str, int]
    resync_requests: int
    state_rows: int | None
    state_memory_bytes: int | None
    state_metrics: dict[str, float]

    @property
    def total_lag(self) -> int | None:
        return None if self.kafka_lag is None else sum(self.kafka_lag.values())

    def to_json(self) -> dict:
        """The JSON log's record: lag as ``{"topic": {"partition": offsets}}`` like Kafka offsets."""
        lag: dict[str, dict[str, int]] | None = None
        if self.kafka_lag is not None:
            lag = {}
            for (topic, part), value in sorted(self.kafka_lag.items()):
                lag.setdefault(topic, {})[str(part)] = value
        return {"batch_id": self.batch_id, "timestamp": self.timestamp, "records_read": self.records_read,
                "duration_seconds": self.duration_seconds, "records_per_second": self.records_per_second,
                "kafka_lag": lag, "kafka_lag_total": self.total_lag,
                "sessions": self.sessions, "violations": self.violations,
                "resync_requests": self.resync_requests,
                "state_rows": self.state_rows, "state_memory_bytes": self.state_memory_bytes,
                "state_metrics": self.state_metrics}

    def json_line(self) -> str:
        return json.dumps(self.to_json(), sort_keys=False, separators=(",", ":")) + "\n"


def batch_metrics(progress: Mapping, counts: BatchCounts = NO_COUNTS) -> BatchMetrics:
    """A progress report (``StreamingQueryProgress.json``, parsed) and the batch's counts, combined."""
    durations = progress.get("durationMs") or {}
    state = (progress.get("stateOperators") or [{}])[0] or {}
    custom = state.get("customMetrics") or {}
    return BatchMetrics(
        batch_id=int(progress.get("batchId", -1)),
        timestamp=progress.get("timestamp"),
        records_read=int(_number(progress.get("numInputRows"))),
        duration_seconds=_number(durations.get("triggerExecution")) / 1000,
        records_per_second=_number(progress.get("processedRowsPerSecond")),
        kafka_lag=kafka_lag(progress),
        sessions={s: int(counts.sessions.get(s, 0)) for s in STATUSES},
        violations={k: int(n) for k, n in counts.violations.items() if n},
        resync_requests=int(counts.resync_requests),
        state_rows=int(state["numRowsTotal"]) if "numRowsTotal" in state else None,
        state_memory_bytes=int(state["memoryUsedBytes"]) if "memoryUsedBytes" in state else None,
        state_metrics={str(k): _number(v) for k, v in sorted(custom.items()) if not _per_partition(str(k))},
    )


def _per_partition(name: str) -> bool:
    """A state store metric of one shuffle partition ("SnapshotLastUploaded.partition_3_default"):
    left out, as there are as many of them as shuffle partitions."""
    return ".partition_" in name


@dataclass
class RunTotals:
    """The run's counters since the process started (across query restarts), and its last batch."""

    batches: int = 0
    records_read: int = 0
    sessions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    violations: dict[str, int] = field(default_factory=dict)
    resync_requests: int = 0
    last: BatchMetrics | None = None

    def add(self, batch: BatchMetrics) -> None:
        self.batches += 1
        self.records_read += batch.records_read
        for status, n in batch.sessions.items():
            self.sessions[status] = self.sessions.get(status, 0) + n
        for kind, n in batch.violations.items():
            self.violations[kind] = self.violations.get(kind, 0) + n
        self.resync_requests += batch.resync_requests
        if batch.kafka_lag is None and self.last is not None:
            # A batch planned without the broker's offsets leaves the lag as last seen.
            batch = replace(batch, kafka_lag=self.last.kafka_lag)
        self.last = batch
