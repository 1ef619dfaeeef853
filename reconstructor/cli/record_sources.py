"""Where ``reconstructor check`` reads records from: Kafka with confluent-kafka, or a JSON-lines file.

Both give ``KafkaRecord`` batches (``reconstructor.core.record_parse``) and where each partition's
reading started, so the check can tell a session that the start cut (its snapshot lies before)
from one that never sent a snapshot.  Kafka is read with ``read_committed`` and the ``[kafka]``
settings (``reconstructor.kafka_admin.librdkafka_settings``), up to the offsets that existed when
the command started.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from reconstructor.core.record_parse import KafkaRecord
from reconstructor.core.timestamps import from_epoch_millis
from reconstructor.errors import ReconstructorError, UsageError, error_line

#: Records handed to the rules at a time: large enough that each session's step is vectorised,
#: small enough that a batch's frames stay a few tens of MB.
BATCH_RECORDS = 20_000


#: Offsets by partition, each from a first to an end (exclusive).
Ranges = dict[tuple[str, int], tuple[int, int]]


@dataclass
class RecordSource:
    """Batches of records, how many there are to read (None: unknown), each partition's first
    offset read (``starts``: a partition whose first offset is past 0 may cut sessions), and how
    to read some of them again (``again``: the records of the ranges given, in batches)."""

    batches: Iterator[list[KafkaRecord]]
    total: int | None
    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    again: Callable[[Ranges], Iterator[list[KafkaRecord]]] | None = None


def listed_records(records: list[KafkaRecord], batches: list[list[KafkaRecord]] | None = None) -> RecordSource:
    """Records held in memory, in ``batches`` (``BATCH_RECORDS`` at a time when None)."""
    starts: dict[tuple[str, int], int] = {}
    for r in records:
        starts[(r.topic, r.partition)] = min(r.offset, starts.get((r.topic, r.partition), r.offset))
    if batches is None:
        batches = [records[i:i + BATCH_RECORDS] for i in range(0, len(records), BATCH_RECORDS)]

    def again(ranges: Ranges) -> Iterator[list[KafkaRecord]]:
        within = [r for r in records if (r.topic, r.partition) in ranges
                  and ranges[(r.topic, r.partition)][0] <= r.offset < ranges[(r.topic, r.partition)][1]]
        return iter([within[i:i + BATCH_RECORDS] for i in range(0, len(within), BATCH_RECORDS)])

    return RecordSource(iter(batches), len(records), starts, again)


def file_records(path: str) -> RecordSource:
    """A JSON-lines file of records: ``{"topic", "partition", "offset", "timestamp" (epoch ms,
    optional), "key" and "value" (base64, or null)}``, one per line (``docs/contract.md``)."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --file {path}: {error_line(exc)}") from None
    return listed_records([_file_record(path, n, line) for n, line in enumerate(lines, start=1) if line.strip()])


#: What Kafka allows in a record's coordinates: a partition is an int32, an offset and a timestamp
#: int64s (a broker's timestamp may be -1, "none", or any CreateTime a producer set), and a topic
#: name 1 to 249 letters, digits, '.', '_' and '-', other than '.' and '..'.
_INT32_MAX, _INT64_MIN, _INT64_MAX = 2**31 - 1, -2**63, 2**63 - 1
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _file_record(path: str, n: int, line: str) -> KafkaRecord:
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        key, value = (None if data.get(k) is None else base64.b64decode(data[k], validate=True)
                      for k in ("key", "value"))
        topic = data["topic"]
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise ValueError(f"topic {topic!r:.60} is not a Kafka topic name")
        partition = _integer(data, "partition", 0, _INT32_MAX)
        offset = _integer(data, "offset", 0, _INT64_MAX)
        ms = _integer(data, "timestamp", _INT64_MIN, _INT64_MAX) if "timestamp" in data else 0
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise UsageError(f"--file {path} line {n} is not a record ({{\"topic\", \"partition\", \"offset\", "
                         f"\"timestamp\", \"key\", \"value\"}}, key and value in base64): {error_line(exc)}") from None
    return KafkaRecord(topic, partition, offset, from_epoch_millis(ms), key, value)


def _integer(data: dict, name: str, low: int, high: int) -> int:
    """A JSON integer of the record within what Kafka holds there: never a text, a bool or a float
    (``int()`` would take "12", true and 1.5), which Kafka never hands over."""
    value = data[name]
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{name} {value!r:.40} is not an integer in {low}..{high}")
    return value


def kafka_records(bootstrap: str, kafka_options: dict[str, str], starts: dict[tuple[str, int], int],
                  ends: dict[tuple[str, int], int]) -> RecordSource:
    """The records of each partition from its start to its end offset (exclusive)."""
    from confluent_kafka import KafkaError, TopicPartition

    from reconstructor.kafka_admin import reading_consumer

    wanted = {tp: end for tp, end in ends.items() if end > starts[tp]}

    def batches() -> Iterator[list[KafkaRecord]]:
        consumer = reading_consumer(bootstrap, kafka_options, "reconstructor-check", **{"enable.partition.eof": True})
        remaining = dict(wanted)
        try:
            consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in remaining])
            while remaining:
                batch: list[KafkaRecord] = []
                for m in consumer.consume(BATCH_RECORDS, timeout=0.25):
                    # A message from an assigned partition names it, and one without error its offset.
                    tp = (cast(str, m.topic()), cast(int, m.partition()))
                    offset = cast(int, m.offset())
                    error = m.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise ReconstructorError(f"cannot read {tp[0]} partition {tp[1]}: {error.str()}")
                        remaining.pop(tp, None)  # read_committed: its last records may be markers
                        continue
                    end = remaining.get(tp)
                    if end is None or offset >= end:
                        remaining.pop(tp, None)
                        continue
                    stamp = from_epoch_millis(m.timestamp()[1])
                    batch.append(KafkaRecord(tp[0], tp[1], offset, stamp, m.key(), m.value()))
                    if offset >= end - 1:
                        remaining.pop(tp, None)
                if batch:
                    yield batch
        finally:
            consumer.close()

    def again(ranges: Ranges) -> Iterator[list[KafkaRecord]]:
        return kafka_records(bootstrap, kafka_options, {tp: first for tp, (first, _) in ranges.items()},
                             {tp: end for tp, (_, end) in ranges.items()}).batches

    return RecordSource(batches(), sum(end - starts[tp] for tp, end in wanted.items()), dict(starts), again)


def start_offsets(bounds: dict[tuple[str, int], tuple[int, int]],
                  given: dict[str, dict[str, int]] | None) -> dict[tuple[str, int], int]:
    """Where each partition's reading starts: its earliest offset, or the one ``given`` names
    (``{"topic": {"partition": offset}}``, -2 the earliest, -1 the end), kept inside what Kafka holds."""
    starts = {tp: low for tp, (low, _) in bounds.items()}
    for topic, parts in (given or {}).items():
        for part, offset in parts.items():
            tp = (topic, int(part))
            if tp not in bounds:
                raise UsageError(f"--from names {topic} partition {part}, which Kafka does not hold")
            low, high = bounds[tp]
            starts[tp] = low if offset == -2 else high if offset == -1 else min(max(int(offset), low), high)
    return starts
