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


def found_writes(commits: Iterable[tuple[int, str | None]], query_id: str, batch_id: int) -> FoundWrites | None:
    """What ``query_id``'s batch ``batch_id`` committed to a table, from its commits (version,
    ``userMetadata``), newest first.

    The search ends at the writer's first commit of an earlier batch: its later batches' commits
    are all newer.  A commit of a later batch (a checkpoint that went back) counts as this
    batch's too, as Delta's transaction ids counted it.  None when the commits ran out before the
    table's first commit without reaching an earlier batch: the log no longer holds what the
    writer committed (``delta.logRetentionDuration``), so whether the batch did cannot be told.
    """
    done: set[str] = set()
    earlier_release = False
    oldest = None
    for version, metadata in commits:
        oldest = version
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
    if oldest is not None and oldest > 0 and not done and not earlier_release:
        return None
    return FoundWrites(frozenset(done), earlier_release)
