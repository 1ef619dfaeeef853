"""Spark's own Kafka source, subscribed by an anchored topic regex (or, for a replay from given
offsets, assigned exactly the partitions it names)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession


def anchored(pattern: str) -> str:
    """Anchor a topic regex at both ends, so ``sensor-.*`` never matches ``old-sensor-1-dlq``.

    Raises ``re.error`` for a pattern that does not compile, before Spark sees it.
    """
    re.compile(pattern)
    body = pattern
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    return f"^(?:{body})$"


# A task reads a bounded offset range, and the consumer keeps one fetch in flight beyond it.  When
# the range ends at the end of the log (every available-now batch, and most streaming ones), the
# broker holds that fetch for ``fetch.max.wait.ms`` (500 ms by default) waiting for data, and the task
# waits with it, once per partition per batch.  10 ms only costs more fetch requests while there is
# nothing to read.
CONSUMER_DEFAULTS = {"fetch.max.wait.ms": "10"}
# Settings no ``[kafka]`` table may change.  Only committed records are data: a transactional
# producer's aborted records are never read (so never applied, never a violation), and the stream
# ends each batch at the last stable offset.  The offsets a transaction's markers and aborted
# records occupy are simply never seen, which the seq checks never relied on.
CONSUMER_FIXED = {"isolation.level": "read_committed"}


def fixed_setting_overridden(kafka_options: Mapping[str, str]) -> str | None:
    """The ``[kafka]`` key that would change a fixed consumer setting, else None."""
    for key, value in kafka_options.items():
        name = key.removeprefix("kafka.")
        if name in CONSUMER_FIXED and str(value) != CONSUMER_FIXED[name]:
            return key
    return None


def kafka_stream(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topic_pattern: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    kafka_options: Mapping[str, str] | None = None,
    assign_offsets: bool = False,
) -> DataFrame:
    """A streaming DataFrame of Kafka records (key, value, topic, partition, offset, timestamp).

    ``failOnDataLoss`` is false: Spark's check cannot tell a lost record from a topic deleted after
    its sensor was done, so ``reconstructor.spark.data_loss`` decides, before each batch writes.
    ``kafka_options`` are passed through as ``kafka.<name>`` (SASL/SSL settings, for instance)
    and win over the defaults in ``CONSUMER_DEFAULTS``, never over ``CONSUMER_FIXED``.

    ``assign_offsets`` (replays): JSON ``starting_offsets`` name the partitions read, all of them
    and no other (Spark's ``assign``); a subscription would have to name every partition it matches.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "false")
    )
    if assign_offsets and starting_offsets not in ("earliest", "latest"):
        named = json.loads(starting_offsets)
        reader = reader.option("assign", json.dumps({t: sorted(int(p) for p in parts) for t, parts in named.items()}))
    else:
        reader = reader.option("subscribePattern", anchored(topic_pattern))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    options = {**CONSUMER_DEFAULTS, **{k.removeprefix("kafka."): v for k, v in (kafka_options or {}).items()},
               **CONSUMER_FIXED}
    for key, value in options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()
