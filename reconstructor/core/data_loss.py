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
  batch was checked (``recreated_partitions``), was deleted and created again under its name.
  Spark's source would read the new topic from the old one's ``start``, skipping its first
  records.  When none of the old topic's sessions is still open, nothing of it was lost, and the
  partition is read again from its new first offset (``settle_recreated``); else it is a loss;
- a partition new since the last batch is read from its earliest offset, which must be 0.

Offsets that transaction markers and aborted records occupy are never read, but they are still in
Kafka, so they are never taken for a loss.

The Spark shell gathers this verdict's inputs in ``spark.data_loss``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from reconstructor.core.session_status import SessionStatus
from reconstructor.core.state import SessionState
from reconstructor.core.violations import ViolationKind, ViolationRecord

__all__ = ["DataLoss", "Offsets", "find_data_loss", "loss_reaching", "losses_from_json", "losses_to_json",
           "offsets_from_log", "offsets_without", "recreated_partitions", "settle_recreated"]

#: Offsets per (topic, partition).
Offsets = Mapping[tuple[str, int], int]


def offsets_from_log(text: str) -> dict[tuple[str, int], int]:
    """The Kafka source's offsets in a file of the checkpoint: ``offsets/<batch>`` (``v1``, the
    batch's metadata, then the source's offsets) or ``sources/0/0`` (the initial offsets)."""
    source = json.loads(offset_log_lines(text)[-1])
    return {(topic, int(p)): int(o) for topic, parts in source.items() for p, o in parts.items()}


def offset_log_lines(text: str) -> list[str]:
    """The lines of a file of the checkpoint's offset log (``offsets_from_log``'s form): ``v1``,
    the batch's metadata, then the source's offsets, without the padding and blank lines."""
    return [line for line in text.lstrip("\x00").splitlines() if line.strip()]


def offsets_without(text: str, partitions: Iterable[tuple[str, int]]) -> str:
    """An offset-log file (``offsets_from_log``'s form) with ``partitions`` left out of the Kafka
    source's offsets: Spark then takes them for partitions new since that batch, and reads them from
    their earliest offset."""
    dropped = set(partitions)
    lines = text.lstrip("\x00").rstrip("\n").split("\n")
    source = json.loads(lines[-1])
    kept: dict[str, dict[str, int]] = {}
    for topic, parts in source.items():
        left = {p: o for p, o in parts.items() if (topic, int(p)) not in dropped}
        if left:
            kept[topic] = left
    return "\n".join(lines[:-1] + [json.dumps(kept, separators=(",", ":"))])


@dataclass(frozen=True)
class DataLoss:
    """Offsets ``first ..`` of a partition that were never processed and are gone from Kafka;
    ``earliest`` is the earliest offset still there, None when the partition itself is gone."""

    topic: str
    partition: int
    first: int
    earliest: int | None
    detail: str

    def violation(self) -> ViolationRecord:
        """The loss as one record: the line a run stops on, or the partition's row in ``violations``
        (quarantine mode)."""
        return ViolationRecord(ViolationKind.DATA_LOSS, self.topic, self.partition, self.first, None,
                                  None, None, self.detail)

    def violation_for(self, session: str, state: SessionState) -> ViolationRecord:
        """The loss as one session's own ``violations`` row (quarantine mode): its next seq expected."""
        expected = None if state.last_seq is None else state.last_seq + 1
        return ViolationRecord(ViolationKind.DATA_LOSS, self.topic, self.partition, self.first, session,
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


#: For some partitions, the sessions on each that are not ended or timed out (asked only when a
#: partition is gone or created again, since it reads the tables).
OpenSessions = Callable[[Iterable[tuple[str, int]]], Mapping[tuple[str, int], list[str]]]


def _shown(sessions: list[str]) -> str:
    return ", ".join(sessions[:3]) + (f" and {len(sessions) - 3} more" if len(sessions) > 3 else "")


def find_data_loss(start: Offsets, end: Offsets, earliest: Mapping[tuple[str, int], int | None],
                   open_sessions: OpenSessions, recreated: Iterable[tuple[str, int]] = ()) -> list[DataLoss]:
    """Each partition's loss in one micro-batch, in (topic, partition) order.

    ``earliest``: each partition of ``end``'s earliest offset in Kafka now (None when it is gone).
    ``recreated``: partitions whose topic was created again (``recreated_partitions``), which
    ``settle_recreated`` judges instead.
    """
    skipped = set(recreated)
    found: dict[tuple[str, int], DataLoss] = {}
    gone = sorted(tp for tp in start if tp not in end or (earliest.get(tp) is None and end[tp] == start[tp]))
    for tp in sorted(end):
        topic, partition = tp
        now = earliest.get(tp)
        if tp in gone or tp in skipped:
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
        if now is None:
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
                found[tp] = DataLoss(topic, partition, start[tp], None,
                                     f"{topic}[{partition}] was deleted with {len(sessions)} session(s) not "
                                     f"ended ({_shown(sessions)}): offsets from {start[tp]} on are gone")
    return [found[tp] for tp in sorted(found)]


def recreated_partitions(start: Offsets, end: Offsets, recorded_ids: Mapping[str, str],
                         current_ids: Mapping[str, str]) -> dict[tuple[str, int], str]:
    """The partitions of topics deleted and created again under their name since the last check,
    each with how it shows.

    Spark's source knows topics by name only: it reads a topic created again from where the old one
    ended, skipping the new one's records before that offset.  Kafka gives each topic a new id when
    it is created, so a topic whose id differs from the one recorded at the last check shows it; so
    does a partition that now ends before where the last batch ended.  Only partitions the run had
    read past offset 0 of count: the new topic is read from its start there anyway.
    """
    found = {}
    for tp, first in sorted(start.items()):
        topic, partition = tp
        was, now = recorded_ids.get(topic), current_ids.get(topic)
        if first <= 0 or tp not in end:
            continue
        if was is not None and now is not None and was != now:
            found[tp] = f"{topic} was deleted and created again (its topic id changed)"
        elif end[tp] < first:
            found[tp] = (f"{topic}[{partition}] ends at offset {end[tp]}, before offset {first} where the last "
                         f"batch ended: the topic was deleted and created again")
    return found


def settle_recreated(recreated: Mapping[tuple[str, int], str], start: Offsets, open_sessions: OpenSessions
                     ) -> tuple[list[tuple[str, int]], list[DataLoss]]:
    """What becomes of each partition created again: read again from its new first offset, when none
    of the old topic's sessions there is still open (every record the run saw was processed, and
    nothing more was to come of them), or a loss of what the old topic held past ``start``."""
    if not recreated:
        return [], []
    still_open = open_sessions(sorted(recreated))
    reread, losses = [], []
    for tp, how in sorted(recreated.items()):
        sessions = sorted(still_open.get(tp, ()))
        if not sessions:
            reread.append(tp)
            continue
        topic, partition = tp
        losses.append(DataLoss(topic, partition, start[tp], None,
                               f"{how} with {len(sessions)} session(s) not ended ({_shown(sessions)}): the old "
                               f"topic's offsets from {start[tp]} on are gone"))
    return reread, losses
