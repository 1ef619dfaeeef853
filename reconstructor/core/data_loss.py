"""Records never processed and gone from Kafka: the ``DATA_LOSS`` verdict of a micro-batch.

Spark's ``failOnDataLoss`` cannot tell a loss from a topic whose sensor is done: a topic deleted
after all its sessions ended fails the query, and every later run, the same way.  The
reconstructor can tell them apart, because it knows where each partition's last batch ended and
the state of every session on it.  For one micro-batch, with ``start`` (where the batch begins on
each partition: the previous batch's end offsets) and ``end`` (where it ends), read from the
checkpoint's offset log:

- a partition in ``start`` and gone from ``end`` (its topic, or the partition, was deleted) is no
  loss when none of its sessions is still open or quarantined: everything the run saw of it was
  processed and nothing more was to come; else it is a loss, from ``start`` on;
- a partition whose earliest offset still in Kafka (read after the batch's records were fetched)
  is past ``start`` lost ``start .. earliest - 1``: deleted by retention or ``delete-records``
  before they were read;
- a partition whose end moved back before its start, or whose topic id changed since the last
  batch was checked (``recreated_topics``), was deleted and created again under its name: its
  records up to ``start`` would be skipped;
- a partition new since the last batch is read from its earliest offset, which must be 0.

Offsets that transaction markers and aborted records occupy are never read, but they are still in
Kafka, so they are never taken for a loss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from reconstructor.core.state import SessionState, SessionStatus
from reconstructor.core.violations import IntegrityViolation, ViolationKind

__all__ = ["DataLoss", "Offsets", "find_data_loss", "loss_reaching", "losses_from_json", "losses_to_json",
           "offsets_from_log", "recreated_topics"]

#: Offsets per (topic, partition).
Offsets = Mapping[tuple[str, int], int]


def offsets_from_log(text: str) -> dict[tuple[str, int], int]:
    """The Kafka source's offsets in a file of the checkpoint: ``offsets/<batch>`` (``v1``, the
    batch's metadata, then the source's offsets) or ``sources/0/0`` (the initial offsets)."""
    lines = [line for line in text.lstrip("\x00").splitlines() if line.strip()]
    source = json.loads(lines[-1])
    return {(topic, int(p)): int(o) for topic, parts in source.items() for p, o in parts.items()}


@dataclass(frozen=True)
class DataLoss:
    """Offsets ``first ..`` of a partition that were never processed and are gone from Kafka;
    ``earliest`` is the earliest offset still there, None when the partition itself is gone."""

    topic: str
    partition: int
    first: int
    earliest: int | None
    detail: str

    def violation(self) -> IntegrityViolation:
        """The loss as one record: the line a run stops on, or the partition's row in ``violations``
        (quarantine mode)."""
        return IntegrityViolation(ViolationKind.DATA_LOSS, self.topic, self.partition, self.first, None,
                                  None, None, self.detail)

    def violation_for(self, session: str, state: SessionState) -> IntegrityViolation:
        """The loss as one session's own ``violations`` row (quarantine mode): its next seq expected."""
        expected = None if state.last_seq is None else state.last_seq + 1
        return IntegrityViolation(ViolationKind.DATA_LOSS, self.topic, self.partition, self.first, session,
                                  expected, None, self.detail)


def losses_to_json(losses: Iterable[DataLoss]) -> str:
    return json.dumps([[d.topic, d.partition, d.first, d.earliest, d.detail] for d in losses])


def losses_from_json(text: str) -> list[DataLoss]:
    return [DataLoss(t, int(p), int(f), None if e is None else int(e), detail)
            for t, p, f, e, detail in json.loads(text)]


def loss_reaching(state: SessionState, topic: str, losses: Mapping[tuple[str, int], list[DataLoss]]
                  ) -> DataLoss | None:
    """In quarantine mode, the loss that sets this session aside: the first one on its partition
    past its last applied record, while it could still receive records (open or timed out).  A
    session quarantined, ended, or seen past the loss (resynced since) is not reached."""
    if state.status not in (SessionStatus.OPEN, SessionStatus.TIMED_OUT) or state.last_offset is None:
        return None
    for loss in losses.get((topic, state.partition), ()):
        if loss.first > state.last_offset:
            return loss
    return None


def _lost(topic: str, partition: int, first: int, earliest: int) -> DataLoss:
    return DataLoss(topic, partition, first, earliest,
                    f"offsets {first}..{earliest - 1} of {topic}[{partition}] were never processed and are "
                    f"gone from Kafka (the earliest offset still there is {earliest})")


def find_data_loss(start: Offsets, end: Offsets, earliest: Mapping[tuple[str, int], int | None],
                   open_sessions: Callable[[Iterable[tuple[str, int]]], Mapping[tuple[str, int], list[str]]],
                   ) -> list[DataLoss]:
    """Each partition's loss in one micro-batch, in (topic, partition) order.

    ``earliest``: each partition of ``end``'s earliest offset in Kafka now (None when it is gone).
    ``open_sessions``: for some partitions, the sessions on each that are not ended or timed out
    (asked only when a partition is gone, since it reads the tables).
    """
    found: dict[tuple[str, int], DataLoss] = {}
    gone = sorted(tp for tp in start if tp not in end or (earliest.get(tp) is None and end[tp] == start[tp]))
    for tp in sorted(end):
        topic, partition = tp
        now = earliest.get(tp)
        if tp in gone:
            continue
        if tp not in start:  # new since the last batch: read from its earliest offset
            if now is not None and now > 0:
                found[tp] = _lost(topic, partition, 0, now)
            elif now is None:
                found[tp] = DataLoss(topic, partition, 0, None,
                                     f"{topic}[{partition}] was deleted while its records were being read")
            continue
        first = start[tp]
        if first < 0:  # "earliest" or "latest" as given, not yet an offset: nothing read is missing
            continue
        if end[tp] < first:
            found[tp] = DataLoss(topic, partition, end[tp], None,
                                 f"{topic}[{partition}] ends at offset {end[tp]}, before offset {first} where "
                                 f"the last batch ended: the topic was deleted and created again, and its "
                                 f"records up to offset {first} would be skipped")
        elif now is None:
            found[tp] = DataLoss(topic, partition, first, None,
                                 f"{topic}[{partition}] was deleted while offsets from {first} were being read")
        elif now > first:
            found[tp] = _lost(topic, partition, first, now)
    if gone:
        still_open = open_sessions(gone)
        for tp in gone:
            sessions = sorted(still_open.get(tp, ()))
            if sessions:
                topic, partition = tp
                shown = ", ".join(sessions[:3]) + (f" and {len(sessions) - 3} more" if len(sessions) > 3 else "")
                found[tp] = DataLoss(topic, partition, start[tp], None,
                                     f"{topic}[{partition}] was deleted with {len(sessions)} session(s) not "
                                     f"ended ({shown}): offsets from {start[tp]} on are gone")
    return [found[tp] for tp in sorted(found)]


def recreated_topics(start: Offsets, recorded_ids: Mapping[str, str], current_ids: Mapping[str, str]
                     ) -> list[DataLoss]:
    """The partitions of topics deleted and created again under their name since the last check.

    Spark's source knows topics by name only: it reads a topic created again from where the old one
    ended, skipping the new one's records before that offset.  Kafka gives each topic a new id when
    it is created, so a topic whose id differs from the one recorded at the last check, and that
    the run had read past offset 0 of, is stopped on.
    """
    found = []
    for (topic, partition), first in sorted(start.items()):
        was, now = recorded_ids.get(topic), current_ids.get(topic)
        if was is not None and now is not None and was != now and first > 0:
            found.append(DataLoss(topic, partition, 0, None,
                                  f"{topic} was deleted and created again (its topic id changed) after the run "
                                  f"read {topic}[{partition}] up to offset {first}: the new topic's records "
                                  f"before that offset would be skipped"))
    return found
