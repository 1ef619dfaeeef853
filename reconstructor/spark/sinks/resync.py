"""``ResyncRequests``: after a batch's writes, the requests its quarantined sessions send to the
resync topic (``reconstructor.core.resync`` decides which), through Spark's own Kafka sink, and
each request's time in its ``sessions`` row.

The requests are produced before their time is committed: a crash in between sends them again on
the batch's re-run (at least once), never not at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import RESYNC_REQUESTED_AT, SESSIONS, RecordKind
from reconstructor.core.resync import ResyncRequest, SetAside, requests_due
from reconstructor.core.timestamps import from_epoch_micros
from reconstructor.core.violations import ViolationKind
from reconstructor.spark.sinks.idempotency import BatchTransactions
from reconstructor.spark.sinks.records import is_record
from reconstructor.spark.source import CONSUMER_FIXED

#: The fields of a recorded row's ``info`` a request names (its raw value stays out).
_RECORDED_DDL = ("kind STRING, partition INT, offset BIGINT, session STRING, expected_seq BIGINT, "
                 "found_seq BIGINT")


@dataclass
class ResyncRequests:
    """Requests to ``topic`` on ``bootstrap_servers`` (with the run's ``[kafka]`` settings), each
    session asked again at most every ``interval`` while it stays quarantined."""

    spark: SparkSession
    topic: str
    bootstrap_servers: str
    interval: dt.timedelta
    kafka_options: Mapping[str, str] = field(default_factory=dict)

    def send(self, txn: BatchTransactions, batch: DataFrame, now: dt.datetime | None = None) -> int:
        """The batch's requests, produced and then recorded in ``sessions``; how many were sent."""
        now = now or dt.datetime.now(dt.UTC)
        due = requests_due(self._set_aside(txn, batch), now, self.interval)
        if not due:
            return 0
        self._produce(due)
        self._record(txn, due)
        return len(due)

    def _set_aside(self, txn: BatchTransactions, batch: DataFrame) -> list[SetAside]:
        """Per session the batch recorded records of: the quarantine in force (its last violation,
        else its last record set aside), beside the session's row as the batch left it."""
        recorded = (batch.filter(is_record(RecordKind.RECORDED))
                    .select("topic", F.from_json("info", _RECORDED_DDL).alias("v"))
                    .where(F.col("v.session").isNotNull()
                           & (F.col("v.kind") != ViolationKind.SNAPSHOT_DRIFT.value)))
        order = F.struct((F.col("v.kind") != ViolationKind.SKIPPED.value).alias("violation"),
                         F.col("v.offset").alias("offset"))
        per_session = (recorded.groupBy("topic", F.col("v.session").alias("session"))
                       .agg(F.max_by("v", order).alias("v")))
        rows = (self.spark.read.format("delta").load(txn.path(SESSIONS))
                .select("topic", "session", "status", "last_seq",
                        F.unix_micros(RESYNC_REQUESTED_AT).alias("requested_us")))
        found = per_session.join(rows, ["topic", "session"], "left").collect()
        return [SetAside(r.topic, r.session, r.v.kind, r.v.partition, r.v.offset, r.v.expected_seq,
                         r.v.found_seq, r.status, r.last_seq, _time(r.requested_us)) for r in found]

    def _produce(self, due: list[ResyncRequest]) -> None:
        """The requests into the resync topic with Spark's Kafka sink: the job fails (and the batch
        with it) when the broker does not take them."""
        out = self.spark.createDataFrame([(r.key(), r.to_json()) for r in due], "key STRING, value STRING")
        writer = (out.write.format("kafka").option("kafka.bootstrap.servers", self.bootstrap_servers)
                  .option("topic", self.topic))
        for key, value in self.kafka_options.items():
            name = key.removeprefix("kafka.")
            if name not in CONSUMER_FIXED:
                writer = writer.option(f"kafka.{name}", value)
        writer.save()

    def _record(self, txn: BatchTransactions, due: list[ResyncRequest]) -> None:
        """Each asked session's ``resync_requested_at``, exactly once per batch."""
        asked = self.spark.createDataFrame([(r.topic, r.session, r.requested_at) for r in due],
                                           f"topic STRING, session STRING, {RESYNC_REQUESTED_AT} TIMESTAMP")
        txn.dml(SESSIONS, lambda: (
            txn.target(SESSIONS).alias("target")
            .merge(asked.alias("source"), "target.topic = source.topic AND target.session = source.session")
            .whenMatchedUpdate(set={RESYNC_REQUESTED_AT: f"source.{RESYNC_REQUESTED_AT}"})
            .execute()), step="-resync")


def _time(micros: int | None) -> dt.datetime | None:
    return None if micros is None else from_epoch_micros(micros)
