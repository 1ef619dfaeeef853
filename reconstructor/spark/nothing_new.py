"""A scheduled run with nothing to do ends before it builds its query (``core.caught_up``).

An ``available-now`` run whose checkpoint already ends where Kafka ends would build the query (the
parse's plan, the tables' states, the stateful step) only for Spark to find no batch to run: about
half of such a run's time.  Before that, the run reads the checkpoint (Hadoop's file system), the
end offsets of the partitions the pattern matches (Java's regex, as Spark's source matches them;
confluent-kafka, read_committed, with the ``[kafka]`` security), the compaction mark, and the
tables' writer (delta-rs).  When all of them say the query would do nothing, it is not started.
Any doubt, or a failure to read any of it, starts the query as before.
"""

from __future__ import annotations

import json
import logging

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pyspark.sql import SparkSession

from reconstructor.audit.delta_tables import OutputTables
from reconstructor.audit.key_check import checked_outputs
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import TABLES
from reconstructor.contract.writer import WRITER_PROPERTY
from reconstructor.core.caught_up import caught_up, start_fingerprint
from reconstructor.core.compaction_schedule import wait_before_compaction
from reconstructor.core.data_loss import offsets_from_log
from reconstructor.kafka_admin import admin_client, librdkafka_settings
from reconstructor.settings import Settings
from reconstructor.spark.checkpoint import checkpoint_state, read_checkpoint_file, write_checkpoint_file
from reconstructor.spark.compaction_mark import CompactionMark
from reconstructor.spark.jvm_gateway import jvm_of
from reconstructor.spark.source import anchored

log = logging.getLogger(__name__)

#: Where a start records the fingerprint of the settings it acted on (beside Spark's files).
START_FILE = "reconstructor/start.json"
#: Part of every fingerprint: raise it when a start learns a step that outputs written before
#: need (an upgrade), so that their next run starts its query whatever Kafka holds.
START_STEPS = 1


def fingerprint(cfg: Settings, command: str) -> str:
    """The fingerprint of what a start of ``command`` acts on with ``cfg`` (no secret in it)."""
    return start_fingerprint({
        "steps": START_STEPS, "command": command, "engine": str(cfg.engine), "output": cfg.need("output").rstrip("/"),
        "row_schema": RowSchema.load(cfg.row_schema).spark_ddl(), "catalog": cfg.catalog,
        "catalog_replace": cfg.catalog_replace, "keyed": cfg.chain_key is not None,
    })


def record_start(spark: SparkSession, cfg: Settings, command: str) -> None:
    """After a start did its work: record what it acted on, so that a later run may end early."""
    write_checkpoint_file(spark, cfg.need("checkpoint"), START_FILE,
                          json.dumps({"fingerprint": fingerprint(cfg, command)}) + "\n")


def nothing_new(spark: SparkSession, cfg: Settings, now) -> str | None:
    """The line to end a ``run`` with when its query would run no batch, else None."""
    if cfg.trigger.continuous or not checked_outputs(cfg.need("output")):
        return None
    try:
        return _nothing_new(spark, cfg, now)
    except Exception as exc:  # noqa: BLE001 - any doubt starts the query, which decides as always
        log.info("starting the query: whether it has anything to do could not be read: %s", exc)
        return None


def _nothing_new(spark: SparkSession, cfg: Settings, now) -> str | None:
    recorded = read_checkpoint_file(spark, cfg.need("checkpoint"), START_FILE)
    if recorded is None or json.loads(recorded).get("fingerprint") != fingerprint(cfg, "run"):
        return None
    if cfg.compact_every is not None:
        last = CompactionMark(spark, cfg.need("output")).last()
        if last is None or wait_before_compaction(last, now, cfg.compact_every).total_seconds() <= 0:
            return None
    checkpoint = checkpoint_state(spark, cfg.need("checkpoint"))
    planned = checkpoint.last_planned
    if checkpoint.last_committed is None or planned != checkpoint.last_committed:
        return None
    text = read_checkpoint_file(spark, cfg.need("checkpoint"), f"offsets/{planned}")
    ended_at = offsets_from_log(text) if text else None
    if ended_at is None or not caught_up(planned, checkpoint.last_committed, ended_at,
                                         _kafka_ends(spark, cfg, set(ended_at))):
        return None
    tables = OutputTables(cfg.need("output"), cfg.s3)
    if any(tables.properties(name).get(WRITER_PROPERTY) != checkpoint.query_id for name in TABLES):
        return None  # another writer's tables, or a takeover: the start's checks decide
    return f"nothing new in Kafka since batch {planned}: no micro-batch to run"


def _kafka_ends(spark: SparkSession, cfg: Settings, known: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The end offset (read_committed) of every partition the pattern matches, by Java's regex as
    Spark's source matches it, and of every partition in ``known``."""
    client = admin_client(cfg.need("bootstrap_servers"), **librdkafka_settings(cfg.kafka))
    metadata = client.list_topics(timeout=30)
    pattern = jvm_of(spark).java.util.regex.Pattern.compile(anchored(cfg.need("topic_pattern")))
    wanted = set(known)
    for name, topic in metadata.topics.items():
        if topic.error is None and pattern.matcher(name).matches():
            wanted |= {(name, p) for p in topic.partitions}
    if not wanted:
        return {}
    futures = client.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
                                  isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    # A partition that is gone raises here: the query then starts, and its data-loss check decides.
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
