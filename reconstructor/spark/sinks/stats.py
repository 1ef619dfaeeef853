"""The one pass over a persisted micro-batch that answers every question asked before it writes,
and what the run reports of it (``Recorded``, the metrics' ``BatchCounts``).

One aggregation computes the batch (the stateful step runs once, into the cache) and answers them
all: empty? a violation? sessions that closed? records set aside?
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from reconstructor.contract.tables import RecordKind
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.violations import KAFKA_ORDER, ViolationKind
from reconstructor.metrics.batch_metrics import STATUSES, VIOLATION_KINDS, BatchCounts
from reconstructor.spark.sinks.records import is_record

DRIFT = ViolationKind.SNAPSHOT_DRIFT.value


@dataclass(frozen=True)
class Recorded:
    """What one micro-batch wrote to ``violations``."""

    set_aside: int  # violations, and records skipped while their session is quarantined
    sessions: int  # the sessions those records belong to (a record naming none counts as one)
    drifts: int  # snapshot drifts


def batch_stats(batch: DataFrame, seals: bool = False) -> Row:
    """The batch's one aggregation row: ``records``, ``violation``, ``closed``, ``recorded``,
    ``drifts``, ``sessions_set_aside``, and per status and kind the metrics' counts; with
    ``seals``, ``session_seals``: each session record's (topic, session, chain_seal, last_offset,
    status), for the fleet seal (``fleet_seal``)."""
    is_session = is_record(RecordKind.SESSION)
    is_recorded = is_record(RecordKind.RECORDED)
    status, kind = F.get_json_object("info", "$.status"), F.get_json_object("info", "$.kind")
    session_seals = F.collect_list(F.when(is_session, F.struct(
        "topic", "session", F.get_json_object("info", "$.chain_seal").alias("chain_seal"),
        F.get_json_object("info", "$.last_offset").cast("long").alias("last_offset"),
        status.alias("status")))).alias("session_seals")
    return batch.agg(
        *([session_seals] if seals else []),
        F.count(F.lit(1)).alias("records"),
        # Of several sessions' violations, the first record in Kafka order (the test kit's
        # ``first_in_kafka_order``): the one a run reading the batch's records one at a time in
        # that order would have stopped at.
        F.min_by("info", F.when(is_record(RecordKind.VIOLATION),
                                F.struct(*KAFKA_ORDER))).alias("violation"),
        F.count(F.when(is_session & (status != SessionStatus.OPEN.value), 1)).alias("closed"),
        F.count(F.when(is_recorded, 1)).alias("recorded"),
        F.count(F.when(is_recorded & (kind == DRIFT), 1)).alias("drifts"),
        F.count_distinct(F.when(is_recorded & (kind != DRIFT),
                                F.struct("topic", "session"))).alias("sessions_set_aside"),
        # For the metrics: session records by status, recorded rows by kind.
        *[F.count(F.when(is_session & (status == s), 1)).alias(f"status_{s}") for s in STATUSES],
        *[F.count(F.when(is_recorded & (kind == k), 1)).alias(f"kind_{k}") for k in VIOLATION_KINDS],
    ).collect()[0]


def recorded_of(stats: Row) -> Recorded:
    """What the batch of ``stats`` wrote to ``violations``."""
    return Recorded(stats.recorded - stats.drifts, stats.sessions_set_aside, stats.drifts)


def counts_of(stats: Row, resync_requests: int = 0) -> BatchCounts:
    """The metrics of the batch of ``stats``: session records by status, recorded rows by kind, and
    the resync requests the batch sent."""
    return BatchCounts({s: stats[f"status_{s}"] for s in STATUSES},
                       {k: stats[f"kind_{k}"] for k in VIOLATION_KINDS}, resync_requests)
