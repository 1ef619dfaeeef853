"""The ``DATA_LOSS`` check of each micro-batch, with what the driver can read: the batch's offsets
from the checkpoint, each partition's earliest offset from Kafka, and the sessions table.

The pure verdict is ``reconstructor.core.data_loss``; this module only gathers its inputs.  The
Kafka source runs with ``failOnDataLoss=false`` so that a topic deleted after its sensor is done
does not stop the query; this check then stops it on every real loss, before the batch writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import SESSIONS, table_path
from reconstructor.core.data_loss import (
    DataLoss,
    find_data_loss,
    losses_from_json,
    losses_to_json,
    offsets_from_log,
    offsets_without,
    recreated_partitions,
    settle_recreated,
)
from reconstructor.core.session_status import SessionStatus
from reconstructor.errors import ReconstructorError
from reconstructor.kafka_admin import admin_client, librdkafka_settings
from reconstructor.spark.checkpoint import read_checkpoint_file, write_checkpoint_file

__all__ = ["KafkaLossCheck", "LossRegistry"]

#: Sessions whose topic may go: nothing more was to come of them.
_DONE = (SessionStatus.ENDED.value, SessionStatus.TIMED_OUT.value)
#: Beside Spark's files in the checkpoint: each topic's id as the last check saw it.
TOPIC_IDS_FILE = "reconstructor/topic-ids.json"
#: Beside Spark's files in the checkpoint: the losses a run in quarantine mode went on past.
LOSSES_FILE = "reconstructor/losses.json"


class KafkaLossCheck:
    """Called with a batch id once the batch's records were fetched: its losses, in (topic,
    partition) order (an empty list when there is none).  ``reread`` then holds the partitions of
    topics created again that are to be read from their new first offset (``read_again``)."""

    def __init__(self, spark: SparkSession, checkpoint: str, output: str, bootstrap_servers: str,
                 kafka_options: Mapping[str, str]):
        self.spark = spark
        self.checkpoint = checkpoint
        self.output = output
        self._bootstrap = bootstrap_servers
        self._admin_conf = librdkafka_settings(kafka_options)
        self._admin = None
        self._recorded_ids: dict[str, str] | None = None
        self._seen_ids: dict[str, str] | None = None  # at the last check
        self._last_end: tuple[int, dict | None] | None = None  # the last checked batch's end offsets
        self.reread: list[tuple[str, int]] = []
        #: The checked batch's end offsets (None when its offset log is not one this check knows).
        self.batch_end: dict | None = None

    def __call__(self, batch_id: int) -> list[DataLoss]:
        end = self._offsets(f"offsets/{batch_id}")
        start: dict | None
        if self._last_end is not None and self._last_end[0] == batch_id - 1:
            start = self._last_end[1]  # an offset-log entry never changes once written: read it once
        else:
            start = self._offsets(f"offsets/{batch_id - 1}" if batch_id > 0 else "sources/0/0")
        self._last_end = (batch_id, end)
        self.batch_end = end
        self.reread = []
        if end is None or start is None:
            return []  # not a Kafka offset log this check knows: Spark's own checks stand
        current = self._topic_ids({t for t, _ in end})
        recreated = recreated_partitions(start, end, self._recorded(), current)
        losses = find_data_loss(start, end, self._earliest(end), self._open_sessions, recreated)
        self.reread, lost = settle_recreated(recreated, start, self._open_sessions)
        losses += lost
        self._seen_ids = current
        if not losses and not self.reread:
            self.accept()
        return sorted(losses, key=lambda d: (d.topic, d.partition))

    def read_again(self, batch_id: int) -> None:
        """Have the query read ``reread`` from their new first offset when it starts again: batch
        ``batch_id`` (planned, not committed) then runs again from a start that lacks them, and
        Spark's source reads a partition it has no start for from its earliest offset."""
        relative = f"offsets/{batch_id - 1}"
        text = read_checkpoint_file(self.spark, self.checkpoint, relative)
        if text is None or not self.reread:
            raise ReconstructorError(f"cannot read {self.reread} again: the checkpoint has no {relative}")
        write_checkpoint_file(self.spark, self.checkpoint, relative, offsets_without(text, self.reread))
        self._last_end = None

    def accept(self) -> None:
        """The run goes on past the last check's losses (or there were none): the topic ids it saw
        are the ones the next check compares with."""
        current = self._seen_ids
        if current is not None and current != self._recorded():
            write_checkpoint_file(self.spark, self.checkpoint, TOPIC_IDS_FILE, json.dumps(current, sort_keys=True))
            self._recorded_ids = current

    def _recorded(self) -> dict[str, str]:
        if self._recorded_ids is None:
            text = read_checkpoint_file(self.spark, self.checkpoint, TOPIC_IDS_FILE)
            self._recorded_ids = json.loads(text) if text else {}
        return self._recorded_ids

    def _client(self):
        if self._admin is None:
            self._admin = admin_client(self._bootstrap, **self._admin_conf)
        return self._admin

    def _topic_ids(self, topics) -> dict[str, str]:
        """Each topic's id in Kafka now (a topic that is gone is absent)."""
        if not topics:
            return {}
        out = {}
        for name, future in self._client().describe_topics(TopicCollection(sorted(topics)),
                                                           request_timeout=30).items():
            try:
                out[name] = str(future.result().topic_id)
            except KafkaException as exc:
                if not _is_unknown_partition(exc):
                    raise ReconstructorError(f"cannot describe topic {name} in Kafka: {exc.args[0].str()}") from None
        return out

    def _offsets(self, relative: str) -> dict | None:
        text = read_checkpoint_file(self.spark, self.checkpoint, relative)
        return None if text is None else offsets_from_log(text)

    def _earliest(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """Each partition's earliest offset in Kafka now; None for one that is gone."""
        wanted = {TopicPartition(t, p): OffsetSpec.earliest() for t, p in partitions}
        if not wanted:
            return {}
        futures = self._client().list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                           request_timeout=30)
        out: dict[tuple[str, int], int | None] = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                if not _is_unknown_partition(exc):
                    raise ReconstructorError(f"cannot read the earliest offset of {tp.topic}[{tp.partition}] "
                                             f"from Kafka: {exc.args[0].str()}") from None
                out[(tp.topic, tp.partition)] = None
        return out

    def _open_sessions(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[str]]:
        """The sessions on ``partitions`` the tables do not show ended or timed out."""
        wanted = set(partitions)
        try:
            rows = (self.spark.read.format("delta").load(table_path(self.output, SESSIONS))
                    .where(~F.col("status").isin(*_DONE))
                    .select("topic", "partition", "session").collect())
        except AnalysisException:  # no sessions table yet: nothing was ever written
            return {}
        out: dict[tuple[str, int], list[str]] = {}
        for r in rows:
            if (r.topic, r.partition) in wanted:
                out.setdefault((r.topic, r.partition), []).append(r.session)
        return out


def _is_unknown_partition(exc: KafkaException) -> bool:
    from confluent_kafka import KafkaError

    return exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                  KafkaError._UNKNOWN_TOPIC)


class LossRegistry:
    """The ``DATA_LOSS`` a run in quarantine mode went on past, kept beside its checkpoint.

    The state function is told them when the query starts (``by_partition``): a session of a lost
    partition is set aside the next time it runs.  A loss newly found mid-run is added here, and the
    query starts again, so the batch that found it runs again with its sessions told.
    """

    def __init__(self, spark: SparkSession, checkpoint: str):
        self.spark = spark
        self.checkpoint = checkpoint

    def load(self) -> list[DataLoss]:
        text = read_checkpoint_file(self.spark, self.checkpoint, LOSSES_FILE)
        return losses_from_json(text) if text else []

    def by_partition(self) -> dict[tuple[str, int], list[DataLoss]]:
        out: dict[tuple[str, int], list[DataLoss]] = {}
        for d in sorted(self.load(), key=lambda d: (d.topic, d.partition, d.first)):
            out.setdefault((d.topic, d.partition), []).append(d)
        return out

    def add(self, losses: list[DataLoss]) -> list[DataLoss]:
        """Record ``losses``; return those that were not recorded yet."""
        known = self.load()
        keys = {(d.topic, d.partition, d.first) for d in known}
        new = [d for d in losses if (d.topic, d.partition, d.first) not in keys]
        if new:
            write_checkpoint_file(self.spark, self.checkpoint, LOSSES_FILE, losses_to_json(known + new))
        return new
