"""Which of a batch's writes a table already holds, read off its commits: what makes each write
exactly-once.

Every Delta commit a batch makes records, in its ``userMetadata`` (``writer.batch_metadata``), the
writer's query, the batch id and which of the batch's writes it is (``write``: the table, and a
step for a second write on the same table).  Only one driver writes an output (the writer lease),
and a query starts batch N+1 only after every write of batch N committed and its checkpoint
recorded the batch.  So the one batch whose writes may already be in the tables is the batch the
checkpoint planned and did not record (a run that stopped inside it); its tables' newest commits by
this writer say which of its writes committed.  Every other batch writes without a look, and no
write pays Delta's transaction-id check, which rebuilds the table's state from its log.

Commits of earlier releases name no write: they carried Delta's transaction ids (``txnAppId``,
``txnVersion``) instead, so a batch whose earlier attempt left such a commit takes Delta's check
once more (``WriteMode.DELTA``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass

from reconstructor.contract.writer import BATCH_METADATA_KEY, batch_record
from reconstructor.core.data_loss import offset_log_lines

#: The key, in a batch's record, of the write a commit is (``write_name``).
WRITE_KEY = "write"


def write_name(table: str, step: str = "") -> str:
    """The name of one of a batch's writes: its table, and ``step`` for a second write on it."""
    return f"{table}{step}"


def with_write(metadata: str, write: str) -> str:
    """A batch's ``userMetadata`` (``writer.batch_metadata``) for its commit of ``write``."""
    record = json.loads(metadata)
    record[BATCH_METADATA_KEY] = {**record[BATCH_METADATA_KEY], WRITE_KEY: write}
    return json.dumps(record, separators=(",", ":"))


class WriteMode(enum.Enum):
    """How one write of a batch goes."""

    WRITE = "write"  # not in the table: written
    SKIP = "skip"  # an earlier attempt of the batch committed it
    DELTA = "delta"  # an earlier release's attempt committed some write: Delta's transaction ids decide


@dataclass(frozen=True)
class FoundWrites:
    """What a table holds of a writer's batch: the writes committed (``done``), and whether an
    earlier release's commit of it (no write named) is among them."""

    done: frozenset[str]
    by_earlier_release: bool = False

    def mode(self, write: str) -> WriteMode:
        if write in self.done:
            return WriteMode.SKIP
        return WriteMode.DELTA if self.by_earlier_release else WriteMode.WRITE


NOTHING_FOUND = FoundWrites(frozenset())


def found_writes(commits: Iterable[tuple[int, int, str | None]], query_id: str, batch_id: int,
                 planned_at: int | None = None) -> FoundWrites | None:
    """What ``query_id``'s batch ``batch_id`` committed to a table, from its commits (version,
    time in epoch milliseconds, ``userMetadata``), newest first; ``planned_at``: when the
    checkpoint planned the batch (``planned_at``).

    The search ends at the writer's first commit of an earlier batch: its later batches' commits
    are all newer.  A commit of a later batch (a checkpoint that went back) counts as this
    batch's too, as Delta's transaction ids counted it.  When the commits run out before the
    table's first commit without reaching an earlier batch (a new query's first batch has none),
    the log may no longer hold what the writer committed (``delta.logRetentionDuration``): the
    search then still tells when the oldest commit the log keeps is older than the batch's plan,
    since the log keeps every commit newer than that one and the batch committed nothing before
    it was planned.  Else None: whether the batch committed cannot be told.
    """
    done: set[str] = set()
    earlier_release = False
    oldest: tuple[int, int] | None = None
    for version, millis, metadata in commits:
        oldest = (version, millis)
        record = batch_record(metadata)
        if record is None or record.get("query") != query_id or not isinstance(record.get("batch"), int):
            continue
        if record["batch"] < batch_id:
            return FoundWrites(frozenset(done), earlier_release)
        write = record.get(WRITE_KEY)
        if isinstance(write, str):
            done.add(write)
        else:
            earlier_release = True
    kept_since_plan = oldest is None or oldest[0] == 0 or (planned_at is not None and oldest[1] < planned_at)
    if not kept_since_plan and not done and not earlier_release:
        return None
    return FoundWrites(frozenset(done), earlier_release)


def planned_at(offsets_modified: int, offsets_text: str) -> int:
    """When the checkpoint planned a batch, in epoch milliseconds, from its ``offsets/<batch>``
    file: the earlier of the file's modification time (the storage's clock, which stamps Delta's
    commit files too) and the ``batchTimestampMs`` inside it (the clock of the driver that
    planned the batch and wrote its commits, which stamps them where in-commit timestamps are
    on).  Every commit of the batch is later by either clock."""
    lines = offset_log_lines(offsets_text)
    try:
        stamped = int(json.loads(lines[1])["batchTimestampMs"])
    except (IndexError, KeyError, TypeError, ValueError):
        return offsets_modified
    return min(offsets_modified, stamped)


def unknown_writes_line(batch_id: int, path: str, replay: bool) -> str:
    """Why a batch whose writes cannot be told (``found_writes`` None) stops, and what works.  The
    same replay again, into the same output from a new checkpoint: a replay inserts only the
    changes the tables lack, and a new query's first batch looks for nothing.  A run cannot carry
    on from such a replay (a takeover needs its writer's commits, which the log lost), so it
    replays into a new output."""
    head = (f"cannot tell which writes of batch {batch_id} reached {path}: the batch did not end, and the "
            "table's log no longer holds the commits made since it was planned (older than "
            "delta.logRetentionDuration); ")
    if replay:
        return head + "run the same replay again with a new --checkpoint (it inserts only what the tables lack)"
    return head + "replay into a new output instead"
