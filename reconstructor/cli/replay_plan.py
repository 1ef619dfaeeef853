"""Where a replay starts: Kafka offsets for a timestamp, or for each open session's last snapshot
(with the seeds of the sessions it does not rebuild).

Each plan is the JSON offsets a replay's query starts from (``{"topic": {"partition": offset}}``,
-2 earliest, -1 latest).  The plan from last snapshots reads the sessions table with the
command's SparkSession, which the caller passes in; the other plans need no Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from reconstructor.cli import validate
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import SESSIONS, table_path
from reconstructor.core.session_status import SessionStatus
from reconstructor.core.timestamps import parse_rfc3339
from reconstructor.errors import ReconstructorError, UsageError, error_line
from reconstructor.kafka_admin import broker_metadata, librdkafka_settings, reading_consumer, watermark_bounds
from reconstructor.settings import Settings

if TYPE_CHECKING:
    from reconstructor.core.seed import SessionSeeds


def offsets_for_timestamp(cfg: Settings, ts: str) -> str:
    """Per partition of the matching topics, the first offset at or after ``ts`` (RFC 3339)."""
    try:
        when = parse_rfc3339(ts)
    except ValueError as exc:
        raise UsageError(f"--from-timestamp {exc}") from None
    parts = [TopicPartition(t, p, timestamp_ms(when))
             for t, ps in partitions(cfg).items() for p in ps]
    if not parts:
        raise UsageError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    consumer = reading_consumer(cfg.need("bootstrap_servers"), cfg.kafka, "reconstructor-replay")
    try:
        found = consumer.offsets_for_times(parts, timeout=10)
    finally:
        consumer.close()
    return json.dumps(offsets_found(found), sort_keys=True)


def timestamp_ms(when: dt.datetime) -> int:
    """The Kafka timestamp to look up for ``when``: the first millisecond at or after it (a time
    inside a millisecond starts at the next one), and 0 for a time before 1970, which Kafka's
    timestamps never are (-1, -2 and -3 would read as latest, earliest and the newest time)."""
    ms = -(-(when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1))
    return max(0, ms)


def offsets_found(found) -> dict[str, dict[str, int]]:
    """The start offsets of an offsets-for-times lookup: each partition's first offset at or after
    the time, -1 (latest) where it has none; a partition whose lookup failed is an error naming it,
    never a silent "latest"."""
    offsets: dict[str, dict[str, int]] = {}
    for tp in found:
        if tp.error is not None:
            raise ReconstructorError(f"cannot find the offset for --from-timestamp in {tp.topic} partition "
                                     f"{tp.partition}: {tp.error.str() if hasattr(tp.error, 'str') else tp.error}")
        offsets.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset if tp.offset >= 0 else -1
    return offsets


def plan_from_last_snapshot(spark, cfg: Settings) -> tuple[str, SessionSeeds]:
    """Per partition of the matching topics, the smallest snapshot offset of its open sessions that
    Kafka still holds (its earliest offset where it has none), and the seeds of every session of
    those partitions, still within ``--state-retention``, that the replay will not rebuild from
    Kafka: its snapshot lies before its partition's start (an ended, timed-out or quarantined one,
    or an open one whose snapshot is gone from Kafka), so it starts from what the tables hold
    (``core.seed``).  Sessions of other topics, or of partitions gone from Kafka, plan nothing."""
    from reconstructor.spark.session_seeds import read_session_seeds

    found = partitions(cfg)
    if not found:
        raise ReconstructorError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    starts = earliest_offsets(cfg, found)
    try:
        earliest = spark.createDataFrame([(t, int(p), o) for t, ps in starts.items() for p, o in ps.items()],
                                         "topic STRING, partition INT, earliest BIGINT")
        rows = (spark.read.format("delta").load(table_path(cfg.need("output"), SESSIONS))
                .where(f"status = '{SessionStatus.OPEN.value}'").join(earliest, ["topic", "partition"])
                .where("snapshot_offset >= earliest").groupBy("topic", "partition")
                .agg({"snapshot_offset": "min"}).collect())
    except Exception as exc:  # noqa: BLE001 - however Spark or Delta failed, one line naming the table
        raise ReconstructorError(f"cannot read the sessions table under {cfg.output}: "
                                 f"{error_line(exc)}") from None
    for r in rows:
        starts[r["topic"]][str(r["partition"])] = int(r["min(snapshot_offset)"])
    seeds = read_session_seeds(spark, cfg.need("output"), starts, cfg.state_retention, RowSchema.load(cfg.row_schema))
    return json.dumps(starts, sort_keys=True), seeds


def earliest_offsets(cfg: Settings, found: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Each partition's earliest offset in Kafka."""
    bounds = watermark_bounds(cfg.need("bootstrap_servers"), cfg.kafka, found, "reconstructor-replay")
    out: dict[str, dict[str, int]] = {}
    for (topic, p), (low, _) in bounds.items():
        out.setdefault(topic, {})[str(p)] = low
    return out


def partitions(cfg: Settings) -> dict[str, list[int]]:
    """The partitions of each topic that matches ``cfg.topic_pattern``, from the broker."""
    settings = librdkafka_settings(cfg.kafka)  # the stream's security, before any connection
    validate.broker_reachable(cfg.need("bootstrap_servers"), cfg.kafka)
    pattern = re.compile(f"^(?:{cfg.topic_pattern})$")
    meta = broker_metadata(cfg.need("bootstrap_servers"), 10, settings)
    return {t: sorted(tm.partitions) for t, tm in meta.topics.items() if pattern.match(t)}
