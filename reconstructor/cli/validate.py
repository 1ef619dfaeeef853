"""Checks that run before anything starts, each failing with one line that says what to fix."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from reconstructor.contract.row_schema import RowSchema
from reconstructor.errors import SchemaError, SecurityRefused, UsageError
from reconstructor.failures import endpoint_address, kafka_down, kafka_refuses, s3_endpoint_down
from reconstructor.kafka_admin import broker_metadata, librdkafka_settings
from reconstructor.settings import SAFE_VACUUM_RETENTION, duration_text


def topic_pattern(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--topic-pattern {pattern!r} is not a valid regex: {exc}") from None
    return pattern


def resync_topic(topic: str | None, pattern: str | None) -> None:
    """A resync topic is a Kafka topic name, and not one the run reads: it would read its own
    requests as sensor messages."""
    from reconstructor.spark.source import anchored

    if topic is None:
        return
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic) or topic in (".", ".."):
        raise UsageError(f"--resync-topic {topic!r} is not a Kafka topic name (letters, digits, '.', '_', "
                         "'-'; at most 249)")
    if pattern is not None and re.match(anchored(pattern), topic):
        raise UsageError(f"--resync-topic {topic!r} is matched by --topic-pattern {pattern!r}: the run "
                         "would read its own resync requests; pick a topic outside the pattern")


def classic_spark(master: str | None, spark_conf: Mapping[str, str],
                  environ: Mapping[str, str] = os.environ) -> None:
    """Refuse Spark Connect (exit 2) before Spark starts: the stream's ``foreachBatch`` sinks keep
    the run's state (the writer lease's checks, what each batch recorded, a violation that stopped
    it) in this process and read checkpoints, logs and Delta's history through the driver's JVM
    (Py4J).  A Connect client has no such JVM and runs ``foreachBatch`` in a process of the server."""
    asked = spark_connect_asked(master, spark_conf, environ)
    if asked is not None:
        raise UsageError(
            f"Spark Connect is not supported ({asked}): the reconstructor needs a classic Spark driver, whose "
            "JVM it calls through Py4J and whose Python process runs its foreachBatch sinks (local[*], "
            "spark-submit, EMR, a Databricks jobs or single-user cluster)")


def spark_connect_asked(master: str | None, spark_conf: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """What would make pyspark build a Spark Connect session rather than start a driver JVM (as its
    ``SparkSession.Builder.getOrCreate`` decides), named without a URL's parameters (a token);
    None for a classic driver."""
    if master and master.strip().lower().startswith("sc://"):
        return f"master sc://{master.strip()[len('sc://'):].split('/')[0].split(';')[0]}"
    if "spark.remote" in spark_conf:
        return "[spark] spark.remote"
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        if name in environ:
            return f"{name} is set"
    # The API mode: the setting's, else the variable's; neither classic nor connect, pyspark's default.
    mode = str(spark_conf.get("spark.api.mode", environ.get("SPARK_API_MODE", ""))).lower()
    if mode == "connect":
        return "[spark] spark.api.mode = connect" if "spark.api.mode" in spark_conf else "SPARK_API_MODE=connect"
    if mode != "classic" and environ.get("SPARK_CONNECT_MODE") == "1":
        return "SPARK_CONNECT_MODE=1"
    return None


def starting_offsets(value: str) -> str:
    if value in ("earliest", "latest"):
        return value
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--starting-offsets must be earliest, latest or JSON offsets: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise UsageError('--starting-offsets JSON must look like {"topic": {"0": 42, "1": -2}}')
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise UsageError(f"--starting-offsets: topic {topic!r} needs a {{partition: offset}} object")
        for part, offset in parts.items():
            if not str(part).isdigit() or not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise UsageError(f"--starting-offsets: {topic}[{part}] = {offset!r} is not a partition "
                                 "number with an offset (-2 earliest, -1 latest)")
    return value


def offsets_within(value: str, topic_pattern: str, flag: str = "--from") -> str:
    """JSON offsets whose every topic ``topic_pattern`` matches (a replay assigns exactly those
    partitions; a topic outside the pattern is most likely a typo)."""
    from reconstructor.spark.source import anchored

    if value in ("earliest", "latest"):
        return value
    pattern = re.compile(anchored(topic_pattern))
    outside = sorted(t for t in json.loads(value) if not pattern.match(t))
    if outside:
        raise UsageError(f"{flag} names {', '.join(outside)}, which --topic-pattern {topic_pattern!r} does not match")
    return value


def state_outlasts_timeout(state_retention: dt.timedelta, session_timeout: dt.timedelta) -> None:
    if state_retention <= session_timeout:
        raise UsageError(f"--state-retention {duration_text(state_retention)!r} must be longer than "
                         f"--session-timeout {duration_text(session_timeout)!r} (a timed-out session "
                         "keeps its state until the retention has passed)")


def vacuum_retention(value: dt.timedelta, unsafe: bool) -> dt.timedelta:
    if value < SAFE_VACUUM_RETENTION and not unsafe:
        raise UsageError(f"--vacuum-retention {duration_text(value)!r} is under "
                         f"{duration_text(SAFE_VACUUM_RETENTION)}, so VACUUM may delete files that a "
                         "reader or a concurrent writer still needs; pass --unsafe-vacuum-retention "
                         "to accept that")
    return value


def row_schema(value: str | None) -> RowSchema:
    try:
        return RowSchema.load(value)
    except SchemaError as exc:
        raise UsageError(f"--row-schema: {exc}") from None


def output_creatable(path: str) -> None:
    """Delta's table builder names a new table's location in SQL without escaping it, so it cannot
    create tables at a path with a back-quote: refused here, before a run reads anything."""
    if "`" in path:
        raise UsageError(f"--output {path}: Delta cannot create tables at a path with a back-quote (`): "
                         "choose another path")


def local_output_writable(path: str, flag: str = "--output") -> None:
    """A local output or checkpoint must be creatable and writable; s3a:// is checked by Spark."""
    if "://" in path and not path.startswith("file://"):
        return
    p = Path(path.removeprefix("file://"))
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".recon-write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {path} is not writable: {exc.strerror or exc}") from None


def kafka_options(options: dict[str, str]) -> None:
    """The ``[kafka]`` table leaves the consumer settings the contract fixes alone."""
    from reconstructor.spark.source import CONSUMER_FIXED, fixed_setting_overridden

    key = fixed_setting_overridden(options)
    if key is not None:
        name = key.removeprefix("kafka.")
        raise UsageError(f"[kafka] {key} cannot be changed: the reconstructor reads only committed "
                         f"records ({name} = {CONSUMER_FIXED[name]})")


def broker_reachable(bootstrap: str, kafka_options: dict[str, str], timeout_s: float = 10.0) -> None:
    """Ask the broker for metadata before Spark starts, with the stream's security settings as
    librdkafka names them: a connection without them would fail, or pass, where the stream's
    would not.  Left to Spark when one has no librdkafka equivalent (a JKS truststore, Kerberos)."""
    try:
        conf = librdkafka_settings(kafka_options)
    except UsageError:
        return
    try:
        broker_metadata(bootstrap, timeout_s, conf)
        return
    except UsageError:  # librdkafka rejects a setting: the line names it
        raise
    except SecurityRefused as exc:
        refused = exc.reason
    except Exception:  # noqa: BLE001 - KafkaException: transport failure, all brokers down
        raise kafka_down(bootstrap) from None
    # Outside the handler: no "Failed to get metadata" cause, which reads as a broker down.
    raise kafka_refuses(bootstrap, conf.get("security.protocol", "PLAINTEXT"), refused)


def resync_topic_exists(bootstrap: str, kafka_options: dict[str, str], topic: str | None,
                        timeout_s: float = 10.0) -> None:
    """The resync topic is there before the run starts: a producer to a missing topic waits a
    minute inside a batch before it fails, and a broker that creates topics on first use would
    create it with its defaults."""
    if topic is None:
        return
    try:
        found = topic in broker_metadata(bootstrap, timeout_s, librdkafka_settings(kafka_options)).topics
    except Exception:  # noqa: BLE001 - broker_reachable has said what is wrong with the broker
        return
    if not found:
        raise UsageError(f"--resync-topic {topic!r} does not exist on {bootstrap}: create it (the sensors "
                         "read their requests from it), then start the run")


def s3_endpoint_reachable(endpoint: str | None, *locations: str | None, timeout_s: float = 5.0) -> None:
    """Connect to the S3 endpoint before Spark starts when a location is on S3: S3A would retry a
    dead endpoint for every file it touches before failing."""
    if not endpoint or not any(str(loc).startswith("s3a://") for loc in locations if loc):
        return
    try:
        socket.create_connection(endpoint_address(endpoint), timeout=timeout_s).close()
    except OSError:  # refused, unknown host, timed out
        raise s3_endpoint_down(endpoint) from None
