"""Who may write an output: a writer is its checkpoint (the streaming query id it keeps).

A re-run batch skips the writes its writer already committed (``batch_writes``), so two
checkpoints writing as one writer would skip each other's batches, and a new checkpoint over
tables another one filled would append everything again.  ``refusal`` decides, before anything is
read from Kafka, whether a command may write the tables as this checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: Table property naming the query id of the checkpoint that writes the tables (``run`` sets it).
WRITER_PROPERTY = "reconstructor.writer"
#: Table property listing, comma-separated, the query ids of the replays that wrote into the
#: tables (each ``replay`` adds its own): a run on a replay's checkpoint may take over as writer.
REPLAYS_PROPERTY = "reconstructor.replays"
#: How many replays the tables remember.
REPLAYS_KEPT = 20
#: The key of a batch's record in the ``userMetadata`` of each Delta commit it makes.
BATCH_METADATA_KEY = "reconstructor"
#: The key of a keyed batch's fleet seal (``core.fleet.FleetSeal``) beside it.
FLEET_METADATA_KEY = "reconstructor.fleet"
#: The key, beside a fleet seal a commit carries forward (``carried_metadata``), of the version of
#: the table's commit that recorded it.
FLEET_ORIGIN_KEY = "reconstructor.fleet_origin"


#: The checkpoint's own file naming the output it writes (``record_output``), beside Spark's files.
OUTPUT_FILE = "reconstructor/output"


@dataclass(frozen=True)
class CheckpointState:
    location: str
    query_id: str | None  # from the checkpoint's ``metadata`` file; None before its first start
    last_committed: int | None  # the last batch id in ``commits/``; None when none was committed
    output: str | None = None  # ``OUTPUT_FILE``; None when new, or written by an earlier release
    last_planned: int | None = None  # the last batch id in ``offsets/``; None when none was planned

    @property
    def pending(self) -> int | None:
        """The batch planned and not committed (a run stopped inside it), which the query runs
        again first; None when every planned batch was committed."""
        if self.last_planned is None or (self.last_committed is not None and self.last_planned <= self.last_committed):
            return None
        return self.last_planned


def same_output(a: str, b: str) -> bool:
    """Two spellings of one output root (a trailing slash aside)."""
    return a.rstrip("/") == b.rstrip("/")


@dataclass(frozen=True)
class TableState:
    name: str
    has_data: bool | None  # None: not read, because it decides nothing (``data_decides``)
    writer: str | None  # WRITER_PROPERTY; None on a new table or one an older version wrote
    replays: tuple[str, ...] = ()  # REPLAYS_PROPERTY


def data_decides(writer: str | None, replays: tuple[str, ...], query_id: str | None) -> bool:
    """Whether a table's holding data can change what ``refusal``, a takeover or the sessions
    ahead conclude. It cannot for a table whose recorded writer is this checkpoint's query and that
    no replay wrote: this query may write it, and nothing of it is ahead of this query."""
    return writer is None or writer != query_id or bool(replays)


def replays_of(text: str | None) -> tuple[str, ...]:
    """The query ids in a REPLAYS_PROPERTY value."""
    return tuple(q for q in (text or "").split(",") if q)


def with_replay(replays: tuple[str, ...], query_id: str) -> str:
    """The REPLAYS_PROPERTY value once ``query_id`` has replayed into the tables (the latest kept)."""
    kept = [q for q in replays if q != query_id] + [query_id]
    return ",".join(kept[-REPLAYS_KEPT:])


def query_id_of(metadata_text: str) -> str:
    """The query id in the text of a checkpoint's ``metadata`` file (``{"id": ...}``)."""
    for line in metadata_text.splitlines():
        if line.strip():
            return str(json.loads(line)["id"])
    raise ValueError("empty checkpoint metadata")


def last_batch(commit_names: Iterable[str]) -> int | None:
    """The last committed batch id, given the file names under ``commits/``."""
    ids = [int(n) for n in commit_names if n.isdigit()]
    return max(ids) if ids else None


def refusal(checkpoint: CheckpointState, tables: Any, output: str, replay: bool) -> str | None:
    """Why this command must not write ``output`` as this checkpoint, or None when it may.

    - A replay always runs on a checkpoint of its own (no committed batch), so it never moves
      another query's checkpoint; it de-duplicates, so any writer's tables are open to it.
    - A run goes on when no table holds data, or when the tables' recorded writer is this
      checkpoint's query.  Tables an older version wrote (no writer recorded) are adopted by a
      checkpoint that has committed batches (it is the one that wrote them) and refused to a new one.
    - A run on the checkpoint of a replay that wrote into the tables takes over as their writer:
      that is how the stream carries on after a replay past a violation.  The writer it replaces
      is refused from then on.
    - Anything else is another writer's data: refused, never skipped, never appended twice.
    - A checkpoint that records another output (``OUTPUT_FILE``) is refused before all that: its
      offsets are that output's, and adopted here they would skip or repeat what this one lacks.
    """
    if checkpoint.output is not None and not same_output(checkpoint.output, output):
        return (f"the checkpoint {checkpoint.location} holds the progress of the output {checkpoint.output}, not "
                f"{output}: give this output a --checkpoint of its own")
    if replay:
        if checkpoint.last_committed is None:
            return None
        return (f"replay needs a checkpoint of its own with no committed batch; {checkpoint.location} "
                f"holds batches up to {checkpoint.last_committed}: give another --checkpoint, or none "
                "for a fresh one")
    held = [t for t in tables if t.has_data]
    mine = checkpoint.query_id
    if all(t.writer == mine or mine in t.replays
           or (t.writer is None and checkpoint.last_committed is not None)
           for t in held) and (mine is not None or not held):
        return None
    others = sorted({t.writer for t in held if t.writer not in (None, mine)})
    if checkpoint.last_committed is None:
        whose = f"the checkpoint {checkpoint.location} is new"
    else:
        whose = f"the checkpoint {checkpoint.location} is query {mine}"
    by = f"query {', '.join(others)}" if others else "another checkpoint"
    return (f"the tables under {output} hold data written by {by} and {whose}: use "
            f"`reconstructor replay` into them (it de-duplicates) or choose another --output")


def batch_metadata(query_id: str, batch_id: int, end_offsets: Any, fleet: dict[str, Any] | None = None,
                   lease: str | None = None) -> str:
    """What each Delta commit of a batch records (its ``userMetadata``): the writer, the batch, and
    the Kafka offsets it read up to, so a takeover can be held to them in the same transaction as
    the writes; the token of the writer lease it was written under (``lease``, when one is held),
    so that which lease wrote what can be read off the history; and on a keyed output the batch's
    fleet seal (``FleetSeal.to_json``)."""
    offsets: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(end_offsets.items()):
        offsets.setdefault(topic, {})[str(partition)] = int(offset)
    batch: dict[str, Any] = {"query": query_id, "batch": batch_id, "offsets": offsets}
    if lease is not None:
        batch["lease"] = lease
    record: dict[str, Any] = {BATCH_METADATA_KEY: batch}
    if fleet is not None:
        record[FLEET_METADATA_KEY] = fleet
    return json.dumps(record, separators=(",", ":"))


#: How many of a table's newest commits are read first for its newest fleet seal: every commit a
#: keyed batch makes carries one, so the newest is nearly always among them.
FLEET_LOOKBACK = 64


def newest_first(history: Callable[[int | None], Sequence[T]], first: int) -> Iterator[T]:
    """A table's commits, newest first, from ``history(limit)`` (Delta's ``DESCRIBE HISTORY``
    through Spark or delta-rs; None: the whole log): the newest ``first`` read first, the rest of
    the log only when a search goes past them."""
    commits = history(first)
    yield from commits
    if len(commits) >= first:
        yield from list(history(None))[len(commits):]


def stamp_metadata(fleet: dict[str, Any]) -> str:
    """The ``userMetadata`` of a keyed start's commits that seal an output's fleet as it stands
    (``seal_rows``): the seal alone, by no batch."""
    return json.dumps({FLEET_METADATA_KEY: fleet}, separators=(",", ":"))


def carried_metadata(fleet: dict[str, Any], origin: int) -> str:
    """The ``userMetadata`` of a commit that changes no data (a compaction, a property) carrying
    forward the fleet seal the table's commit ``origin`` recorded, so that the seal stays in the log
    however long Delta keeps it."""
    return json.dumps({FLEET_METADATA_KEY: fleet, FLEET_ORIGIN_KEY: origin}, separators=(",", ":"))


@dataclass(frozen=True)
class FleetRecord:
    """A fleet seal as a commit recorded it: its fields as written (``FleetSeal.from_json`` reads
    them), and the writer and batch beside it (None: written at a keyed start, by no batch);
    ``origin``: the version of the commit that recorded it first, when this one carries it forward
    (None: this commit recorded it)."""

    fleet: dict[str, Any]
    query: str | None
    batch: int | None
    origin: int | None = None


def fleet_in_metadata(text: str | None) -> FleetRecord | None:
    """The fleet seal a commit's ``userMetadata`` records, else None."""
    try:
        record = json.loads(text) if text else None
        if not isinstance(record, dict):
            return None
        fleet = record.get(FLEET_METADATA_KEY)
        if not isinstance(fleet, dict):
            return None
        batch = record.get(BATCH_METADATA_KEY)
        batch = batch if isinstance(batch, dict) else {}
        origin = record.get(FLEET_ORIGIN_KEY)
        return FleetRecord(fleet, batch.get("query"),
                           int(batch["batch"]) if isinstance(batch.get("batch"), int) else None,
                           origin if isinstance(origin, int) and not isinstance(origin, bool) else None)
    except (ValueError, TypeError):
        return None


def batch_record(text: str | None) -> dict[str, Any] | None:
    """The batch's record (``batch_metadata``) in a commit's ``userMetadata``, else None."""
    try:
        record = json.loads(text)[BATCH_METADATA_KEY] if text else None
    except (ValueError, TypeError, KeyError):
        return None
    return record if isinstance(record, dict) else None


def lease_in_metadata(text: str | None) -> str | None:
    """The token of the writer lease a batch's commit was written under, else None (a commit of no
    batch, of an output with no lease, or of a release before the token was recorded)."""
    lease = (batch_record(text) or {}).get("lease")
    return lease if isinstance(lease, str) else None


def offsets_in_metadata(text: str | None, query_id: str | None) -> dict[tuple[str, int], int] | None:
    """The offsets a commit's ``userMetadata`` records for ``query_id``'s batch (any writer's, for
    None), else None (another writer's commit, a compaction, or a commit of an earlier version)."""
    record = batch_record(text)
    if record is None or (query_id is not None and record.get("query") != query_id):
        return None
    return {(topic, int(p)): int(o) for topic, parts in record.get("offsets", {}).items() for p, o in parts.items()}


def furthest(offset_maps: Any) -> dict[tuple[str, int], int]:
    """Per partition, the furthest offset among ``offset_maps``."""
    out: dict[tuple[str, int], int] = {}
    for offsets in offset_maps:
        for tp, at in offsets.items():
            out[tp] = max(at, out.get(tp, at))
    return out


def reached_everywhere(reached: Any, written: Any) -> bool:
    """Whether offsets ``reached`` are at or past ``written`` on every partition of the latter."""
    return all(reached.get(tp) is not None and reached[tp] >= at for tp, at in written.items())


def takeover_refusal(writer: str, written: Any, checkpoint: CheckpointState, reached: Any, output: str) -> str | None:
    """Why a run on ``checkpoint`` (a replay's) must not take over from the tables' ``writer``,
    or None: each partition the writer ``written`` up to must be ``reached`` by the checkpoint's
    committed batches, or the run would append again what the writer wrote past it."""
    behind = {tp: (at, reached.get(tp)) for tp, at in written.items()
              if reached.get(tp) is None or reached[tp] < at}
    if not behind:
        return None
    (topic, partition), (at, mine) = min(behind.items())
    where = (f"{topic}[{partition}] up to offset {at}, which the checkpoint never read" if mine is None
             else f"{topic}[{partition}] up to offset {at}, the checkpoint to {mine} ({at - mine:,} behind)")
    more = f" and {len(behind) - 1} more partition(s)" if len(behind) > 1 else ""
    return (f"the tables under {output} were written further by their writer, query {writer}, than the "
            f"checkpoint {checkpoint.location} reached: {where}{more}; run on the writer's own checkpoint, "
            f"or replay into the tables (it de-duplicates)")

