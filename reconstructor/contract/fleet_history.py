"""Which fleet seal a table's log holds in force, read newest commit first.

Every commit a keyed batch makes records the batch's fleet seal (``writer.batch_metadata``), and
every other commit the pipeline makes (a compaction, a VACUUM, a property) carries the seal in
force forward (``writer.carried_metadata``), naming the version that recorded it.  So Delta's log
cleanup, which drops commits older than ``delta.logRetentionDuration`` once a checkpoint follows
them, never leaves a table's log without its seal.

A commit the pipeline did not make carries none.  One that changes no data (each of its ``add``,
``remove`` and ``cdc`` actions has ``dataChange=false``, or it has none: a user's OPTIMIZE, a VACUUM,
a property) keeps the seal in force, since the seal's sums are over the rows; one that changes data
is named (``SealedState.unsealed``).  A carried seal whose origin is still in the log gives way to
the commit it names, and to any seal recorded after that: a compaction's commit that read the seal
before a batch committed carries the older one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reconstructor.contract.writer import FleetRecord, fleet_in_metadata

__all__ = ["SealedState", "changes_data", "sealed_state"]

#: The actions that add or remove a table's rows; each says whether it changes the data.
_DATA_ACTIONS = ("add", "remove", "cdc")


def changes_data(commit: str) -> bool:
    """Whether a Delta commit file's text (one JSON action a line) changes the table's data: an
    action that adds or removes rows without ``dataChange=false``."""
    for line in commit.splitlines():
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            return True  # not a commit Delta wrote: nothing says it changes no data
        if not isinstance(action, dict):
            continue
        if any(isinstance(action.get(kind), dict) and action[kind].get("dataChange") is not False
               for kind in _DATA_ACTIONS):
            return True
    return False


@dataclass(frozen=True)
class SealedState:
    """What a table's log says of its fleet seal.

    ``record``: the seal in force (None: the log holds none); ``origin``: the version of the commit
    that recorded it (it may have left the log); ``unsealed``: the newest commit after it that
    changed the table's data and carries no seal (None: none, or not read); ``oldest``: the oldest
    version read (None: no commit), 0 when the log was read whole back to the table's creation."""

    record: FleetRecord | None = None
    origin: int | None = None
    unsealed: int | None = None
    oldest: int | None = None


def sealed_state(commits: Iterable[tuple[int, str | None]],
                 data_changed: Callable[[int], bool | None] | None = None) -> SealedState:
    """The seal in force in a table's log from its commits (version, ``userMetadata``), newest
    first.  ``data_changed(version)`` reads whether a commit with no seal changed the table's data
    (None: its file has left the log since the history was listed); without it, no commit is read.
    """
    carried: tuple[FleetRecord, int] | None = None
    unsealed = oldest = None
    for version, metadata in commits:
        record = fleet_in_metadata(metadata)
        if record is not None and record.origin is None:
            return SealedState(record, version, unsealed, version)
        if record is not None and record.origin is not None:
            if carried is None or record.origin > carried[1]:
                carried = (record, record.origin)
        elif unsealed is None and data_changed is not None:
            changed = data_changed(version)
            if changed is None:
                break  # cleaned from the log while it was read: the log starts after it
            if changed:
                unsealed = version
        oldest = version
    if carried is not None:
        return SealedState(carried[0], carried[1], unsealed, oldest)
    return SealedState(None, None, unsealed, oldest)
