"""Where a replay starts: Kafka offsets for a timestamp, or for each open session's last snapshot.

Each plan is the JSON offsets a replay's query starts from (``{"topic": {"partition": offset}}``,
-2 earliest, -1 latest).  The plan from last snapshots reads the sessions table with the
command's SparkSession, which the caller passes in; the other plans need no Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from confluent_kafka import Consumer, TopicPartition

from reconstructor.cli import validate
from reconstructor.settings import Settings
from reconstructor.core.state import SessionStatus
from reconstructor.core.timestamps import parse_rfc3339
from reconstructor.errors import ReconstructorError, UsageError, error_line
from reconstructor.spark.kafka_admin import broker_metadata, client_or_usage_error, librdkafka_settings
from reconstructor.contract.tables import SESSIONS, table_path


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
    consumer = client_or_usage_error(Consumer, {
        **librdkafka_settings(cfg.kafka), "bootstrap.servers": cfg.bootstrap_servers,
        "group.id": "reconstructor-replay", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    try:
        found = consumer.offsets_for_times(parts, timeout=10)
    finally:
        consumer.close()
    return json.dumps(offsets_found(found), sort_keys=True)


def timestamp_ms(when: dt.datetime) -> int:
    """The Kafka timestamp to look up for ``when``: the first millisecond at or after it (a time
    inside a millisecond starts at the next one), and 0 for a time before 1970, which Kafka's
    timestamps never are (-1, -2 and -3 would read as latest, earliest and the newest time)."""
    ms = -(-(when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(milliseconds=1))
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


def offsets_from_last_snapshot(spark, cfg: Settings) -> str:
    """Per partition, the smallest snapshot offset of its open sessions (from the sessions table).

    Partitions of matching topics with no open session there start at the earliest offset: their
    sessions never reached a table (or ended), and a replay is idempotent.  Sessions of other
    topics, or of partitions gone from Kafka, plan nothing."""
    try:
        rows = (spark.read.format("delta").load(table_path(cfg.output, SESSIONS))
                .where(f"status = '{SessionStatus.OPEN.value}'").groupBy("topic", "partition")
                .agg({"snapshot_offset": "min"}).collect())
    except Exception as exc:
        raise ReconstructorError(f"cannot read the sessions table under {cfg.output}: "
                                 f"{error_line(exc)}") from None
    offsets: dict[str, dict[str, int]] = {
        topic: {str(p): -2 for p in parts} for topic, parts in partitions(cfg).items()}
    for r in rows:  # the matching topics' partitions that Kafka still has
        if str(r["partition"]) in offsets.get(r["topic"], {}):
            offsets[r["topic"]][str(r["partition"])] = int(r["min(snapshot_offset)"])
    if not offsets:
        raise ReconstructorError(f"no topic matches --topic-pattern {cfg.topic_pattern!r}")
    return json.dumps(offsets, sort_keys=True)


def partitions(cfg: Settings) -> dict[str, list[int]]:
    """The partitions of each topic that matches ``cfg.topic_pattern``, from the broker."""
    settings = librdkafka_settings(cfg.kafka)  # the stream's security, before any connection
    validate.broker_reachable(cfg.bootstrap_servers, cfg.kafka)
    pattern = re.compile(f"^(?:{cfg.topic_pattern})$")
    meta = broker_metadata(cfg.bootstrap_servers, 10, settings)
    return {t: sorted(tm.partitions) for t, tm in meta.topics.items() if pattern.match(t)}
