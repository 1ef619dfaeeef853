"""``verify --against-kafka``: the output tables held to the records Kafka still holds.

The at-rest checks (``checks``) hold the tables to each other; a record lost between Kafka and the
lake, or altered on its way, leaves tables that agree.  So each record Kafka still holds for the
output's topics, from a partition's earliest offset up to the offset the writer's last committed
batch ended at (``committed_ends``: the ``userMetadata`` of the live tables' commits, which each
batch makes after its appends), goes through the pipeline's parse (``core.record_parse``) and is
held to the contract's rule for it (``judge``):

- its rows are the ``row_changes`` rows at its (topic, partition, offset), row for row (``row_pos``,
  ``row_id``, ``op``, values), with, for a snapshot, deletes (``row_pos = -1``) of rows it dropped;
- or it has a ``violations`` row there (refused, or ``SKIPPED``: set aside) and no change;
- or both, for a snapshot that drifted or that resynced its session after a gap;
- or nothing, for a message with no rows (an ``end``, an update without rows).

No row at an offset Kafka holds no committed record at may be in either table.  What cannot be told
is counted as not checked, never as passed: offsets Kafka no longer holds, offsets past the
writer's committed ones, records before the first one the output holds on their partition (a
writer's start offsets are not recorded, and records before it leave no trace), and a session's
updates before its first trace in the tables (a replay awaiting a snapshot skips them).

Memory held: per session its first offset in the tables and per partition its bounds; per batch of
records (the caller's, ``BATCH_RECORDS`` at most) their parsed rows and the ``row_changes`` and
``violations`` rows at their offsets, read per partition and ``hour``.  Never a whole table.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from deltalake import QueryBuilder

from reconstructor.audit.checks import DRIFT, Discrepancy
from reconstructor.audit.delta_tables import OutputTables, plain_strings, sql_text
from reconstructor.audit.fold import row_columns, same_value
from reconstructor.contract.row_schema import Column, RowSchema
from reconstructor.contract.tables import CURRENT_ROWS, ROW_CHANGES, SESSIONS, VIOLATIONS, hour_of
from reconstructor.contract.writer import furthest, newest_first, offsets_in_metadata
from reconstructor.core.record_parse import KafkaRecord, parse_record
from reconstructor.core.violations import ViolationKind, quoted
from reconstructor.errors import UsageError

GAP, DATA_LOSS = ViolationKind.GAP.value, ViolationKind.DATA_LOSS.value
#: How many of a live table's newest commits are searched for the writers' batches first (a
#: replay's, compactions and metadata commits may lie between).
ENDS_LOOKBACK = 64
#: The record's outcomes, as the summary counts them.
APPLIED, RECORDED, BOTH, NOTHING = "with changes", "in violations", "both", "with nothing to write"
#: A record the tables do not show, left for the caller to excuse or fail.
MISSING = "missing"
_ARROW_TYPES = (("string", pa.types.is_string), ("string", pa.types.is_large_string),
                ("string", pa.types.is_string_view), ("double", pa.types.is_floating),
                ("long", pa.types.is_integer), ("boolean", pa.types.is_boolean),
                ("timestamp", pa.types.is_timestamp))


TopicPartition = tuple[str, int]


# -- where the writer got to --------------------------------------------------------------------


def committed_ends(tables: OutputTables, topics: str | None) -> dict[TopicPartition, int]:
    """Per partition of the topics ``topics`` matches (all for None), the offset the furthest
    committed batch of any writer ended at (exclusive).  Read from the live tables' commits: a
    batch commits to them after its appends, so what one records is whole in every table."""
    pattern = re.compile(topics) if topics else None
    found: list[dict[TopicPartition, int]] = []
    for name in (SESSIONS, CURRENT_ROWS):
        for n, commit in enumerate(newest_first(tables.table(name).history, ENDS_LOOKBACK)):
            offsets = offsets_in_metadata(commit.get("userMetadata"), None)
            if offsets is not None:
                found.append(offsets)
            if n >= ENDS_LOOKBACK and found:
                break
    return {tp: end for tp, end in furthest(found).items() if pattern is None or pattern.fullmatch(tp[0])}


# -- one record held to the tables --------------------------------------------------------------


@dataclass(frozen=True)
class RecordRow:
    """One row of a message, as the parse reads it."""

    row_pos: int
    row_id: str
    op: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SourceRecord:
    """A record as the parse reads it: what the tables must show of it."""

    topic: str
    partition: int
    offset: int
    session: str | None  # the value's session; None for a record that names none
    group: str | None  # the session it is judged under: the value's, else the Kafka key
    seq: int | None
    type: str | None
    event_ts: dt.datetime | None
    error: str | None  # why it is malformed, else None
    value: str | None  # the Kafka value as text, None when absent or not UTF-8
    rows: tuple[RecordRow, ...]

    def named(self) -> str:
        return f"the {self.type or 'malformed'} record at partition {self.partition} offset {self.offset}"


def source_record(record: KafkaRecord, schema: RowSchema) -> SourceRecord:
    """``record`` through the pipeline's parse (``parse_record``)."""
    parsed = parse_record(record, schema)
    first = parsed[0]
    error = next((r["error"] for r in parsed if r["error"] is not None), None)
    try:
        value = None if record.value is None else record.value.decode("utf-8")
    except UnicodeDecodeError:
        value = None
    rows = tuple(RecordRow(r["row_pos"], r["row_id"], r["op"], tuple(r[n] for n in schema.names))
                 for r in parsed if r["row_pos"] is not None)
    return SourceRecord(record.topic, record.partition, record.offset, first["session"], first["group_session"],
                        first["seq"], first["type"], first["event_ts"], error, value, rows)


def plain(value: Any) -> Any:
    """A time as naive UTC (the parse's), whichever way a reader handed it over."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def same(logged: Any, sent: Any) -> bool:
    """A value of the change log equal to the parse's (a NaN to a NaN, a time in any zone)."""
    return bool(logged == sent) or same_value(plain(logged), plain(sent))


@dataclass(frozen=True)
class Verdict:
    """What the tables show of a record: an outcome (``APPLIED`` ... ``MISSING``), or what they hold
    wrongly (``detail``, in ``table``, naming ``row_id`` where one applies)."""

    outcome: str | None
    detail: str | None = None
    table: str = ROW_CHANGES
    row_id: str | None = None


def _wrong(detail: str, table: str = ROW_CHANGES, row_id: str | None = None) -> Verdict:
    return Verdict(None, detail, table, row_id)


def judge(record: SourceRecord, changes: list[dict[str, Any]], recorded: list[dict[str, Any]],
          names: list[str]) -> Verdict:
    """The record's outcome given the ``row_changes`` rows (``changes``) and the ``violations`` rows
    (``recorded``) at its offset, or what is wrong with them.  ``MISSING``: the record has rows, or
    is malformed, and neither table shows it."""
    recorded = [v for v in recorded if v["kind"] != DATA_LOSS]  # a loss's rows name the offsets lost
    for v in recorded:
        wrong = _recorded_wrongly(record, v)
        if wrong is not None:
            return _wrong(f"{record.named()}: {wrong}", VIOLATIONS)
    kinds = {v["kind"] for v in recorded}
    refused = kinds - {DRIFT}
    if record.error is not None:
        if changes:
            return _wrong(f"{record.named()} is malformed ({record.error}), yet row_changes holds "
                          f"{len(changes)} change(s) at its offset", row_id=changes[0]["row_id"])
        if refused:
            return Verdict(RECORDED)
        return Verdict(MISSING, f"{record.named()} is malformed ({record.error}); violations holds no row of it",
                       VIOLATIONS)
    if not changes:
        if refused:
            return Verdict(RECORDED)
        if not record.rows:
            return Verdict(NOTHING)
        if kinds:
            return _wrong(f"{record.named()} drifted and applies, yet row_changes holds none of its "
                          f"{len(record.rows)} row(s)", row_id=record.rows[0].row_id)
        return Verdict(MISSING, f"{record.named()} has {len(record.rows)} row(s); row_changes holds none of "
                                "them and violations no row of it", row_id=record.rows[0].row_id)
    applies = {DRIFT, GAP} if record.type == "snapshot" else {DRIFT}
    if kinds - applies:
        kind = sorted(kinds - applies)[0]
        return _wrong(f"{record.named()} is a {kind} row in violations, yet row_changes holds its changes",
                      VIOLATIONS, changes[0]["row_id"])
    differs = _changes_wrongly(record, changes, names)
    if differs is not None:
        return differs
    return Verdict(BOTH if kinds else APPLIED)


def _recorded_wrongly(record: SourceRecord, v: dict[str, Any]) -> str | None:
    """Why the ``violations`` row ``v`` at the record's offset is not the record's, else None."""
    kind = v["kind"]
    if record.session is not None and v["session"] is not None and v["session"] != record.session:
        return f"the {kind} row at its offset names session {quoted(v['session'])}, the record {quoted(record.session)}"
    if record.seq is not None and v["found_seq"] is not None and v["found_seq"] != record.seq:
        return f"the {kind} row at its offset has found_seq {v['found_seq']}, the record seq {record.seq}"
    if record.value is not None and v["value"] is not None and v["value"] != record.value:
        return f"the {kind} row at its offset holds another value than the record's"
    return None


def _changes_wrongly(record: SourceRecord, changes: list[dict[str, Any]], names: list[str]) -> Verdict | None:
    """What differs between the record's rows and the changes at its offset, else None."""
    where = record.named()
    for c in changes:
        for name, logged, sent in (("session", c["session"], record.session), ("seq", c["seq"], record.seq),
                                   ("type", c["type"], record.type), ("event_ts", c["event_ts"], record.event_ts)):
            if not same(logged, sent):
                return _wrong(f"{where}: its change of row {quoted(c['row_id'])} has {name} {quoted(plain(logged))}, "
                              f"the record {quoted(sent)}", row_id=c["row_id"])
    placed = {c["row_pos"]: c for c in changes if c["row_pos"] is not None and c["row_pos"] >= 0}
    for row in record.rows:
        if row.row_pos not in placed:
            return _wrong(f"{where}: row_changes lacks its row at row_pos {row.row_pos}", row_id=row.row_id)
        c = placed.pop(row.row_pos)
        if c["row_id"] != row.row_id or c["op"] != row.op:
            return _wrong(f"{where}: row_pos {row.row_pos} is {c['op']} {quoted(c['row_id'])} in row_changes, "
                          f"{row.op} {quoted(row.row_id)} in the record", row_id=row.row_id)
        if tuple(c[name] for name in names) == row.values:
            continue
        for name, sent in zip(names, row.values):
            if not same(c[name], sent):
                return _wrong(f"{where}: {name} is {quoted(plain(c[name]))} in row_changes, {quoted(sent)} in the "
                              "record", row_id=row.row_id)
    if placed:
        extra = placed[min(placed)]
        return _wrong(f"{where}: row_changes holds a change at row_pos {extra['row_pos']} the record does not carry",
                      row_id=extra["row_id"])
    sent_ids = {row.row_id for row in record.rows}
    for c in changes:
        if c["row_pos"] is not None and c["row_pos"] >= 0:
            continue
        if record.type != "snapshot" or c["op"] != "delete":
            return _wrong(f"{where}: row_changes holds a {c['op']} at row_pos -1, which only a snapshot's "
                          "delete of a row it dropped has", row_id=c["row_id"])
        if c["row_id"] in sent_ids:
            return _wrong(f"{where}: row_changes deletes the row as dropped, yet the snapshot carries it",
                          row_id=c["row_id"])
    return None


# -- the walk over Kafka -------------------------------------------------------------------------


def row_schema_of(schema: pa.Schema, names: Iterable[str]) -> RowSchema:
    """The row schema the change log was written with, from its column types."""
    columns = []
    for name in names:
        arrow = schema.field(name).type
        kind = next((k for k, test in _ARROW_TYPES if test(arrow)), None)
        if kind is None:
            raise UsageError(f"row_changes column {name} has type {arrow}, which no row schema type gives")
        columns.append(Column(name, kind))
    return RowSchema(ROW_CHANGES, tuple(columns))


@dataclass
class SourceSummary:
    """What was checked against Kafka, for the report."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys((APPLIED, RECORDED, BOTH, NOTHING), 0))
    before_start: int = 0  # records before the output's first trace on their partition
    awaiting: int = 0  # updates of a session before its first trace
    gone: int = 0  # offsets below Kafka's earliest, up to the writer's end
    past: int = 0  # offsets past the writer's committed ones

    @property
    def checked(self) -> int:
        return sum(self.outcomes.values())

    @property
    def not_checked(self) -> int:
        return self.before_start + self.awaiting

    def lines(self, seconds: float) -> list[str]:
        rate = self.checked / seconds if seconds > 0 else 0.0
        return [
            f"against Kafka: {self.checked:,} records checked ("
            + ", ".join(f"{n:,} {what}" for what, n in self.outcomes.items())
            + f") in {seconds:.1f}s, {rate:,.0f} records/s",
            f"  not checked: {self.not_checked:,} records ({self.before_start:,} before the output's first on their "
            f"partition, {self.awaiting:,} of a session before its first trace), {self.gone:,} offsets no longer "
            f"in Kafka, {self.past:,} offsets past the writer's committed ones",
        ]


class _Table:
    """One table of the output, loaded once (one version for the whole walk), queried by SQL;
    times come back naive UTC, as the parse gives them (a Python time with a zone costs more to
    make than the rest of a row)."""

    def __init__(self, tables: OutputTables, name: str):
        self.name = name
        self._query = QueryBuilder().register("t", tables.table(name))

    def select(self, sql: str) -> pa.Table:
        table = plain_strings(pa.table(self._query.execute(sql)))
        naive = pa.schema([f.with_type(pa.timestamp(f.type.unit)) if pa.types.is_timestamp(f.type) else f
                           for f in table.schema])
        return table if naive == table.schema else table.cast(naive)


def _at(tp: TopicPartition, lo: int, hi: int) -> str:
    return f'topic = {sql_text(tp[0])} AND "partition" = {tp[1]} AND "offset" BETWEEN {lo} AND {hi}'


class SourceCheck:
    """The records of Kafka held to one output's tables, a batch at a time (``add``, then
    ``finish``); the first discrepancy ends the walk.

    ``ends``: the writer's committed end offsets (``committed_ends``); ``bounds``: each partition's
    earliest and end offset in Kafka now, for the partitions of those topics that it holds.
    ``starts`` and ``read_ends`` are then what to read of each partition."""

    def __init__(self, tables: OutputTables, ends: dict[TopicPartition, int],
                 bounds: dict[TopicPartition, tuple[int, int]]):
        self._changes, self._violations = _Table(tables, ROW_CHANGES), _Table(tables, VIOLATIONS)
        columns = self._changes.select("SELECT * FROM t LIMIT 0").schema
        self.names = row_columns(columns.names)
        self.schema = row_schema_of(columns, self.names)
        self._change_columns = ", ".join(f'"{n}"' for n in ("session", "seq", "type", "event_ts", "offset", "row_pos",
                                                             "row_id", "op", *self.names))
        self.summary = SourceSummary()
        self.starts: dict[TopicPartition, int] = {}
        self.read_ends: dict[TopicPartition, int] = {}
        for tp, end in ends.items():
            low, high = bounds.get(tp, (end, end))  # a partition Kafka no longer has: all gone
            self.summary.gone += min(low, end)
            self.summary.past += max(0, high - end)
            if min(end, high) > low:
                self.starts[tp], self.read_ends[tp] = low, min(end, high)
        topics = {t for t, _ in ends}
        self.summary.past += sum(high - low for tp, (low, high) in bounds.items() if tp[0] in topics and tp not in ends)
        self._partition_first, self._session_first, self._last = self._traces(topics)
        self._cursor = dict(self.starts)  # per partition, the next offset the tables are read from

    @property
    def total(self) -> int:
        """Offsets to read (records, markers and aborted records among them)."""
        return sum(self.read_ends[tp] - self.starts[tp] for tp in self.starts)

    def _traces(self, topics: set[str]) -> tuple[dict[TopicPartition, int], dict[tuple[str, str], int],
                                                 dict[TopicPartition, int]]:
        """Per partition the first and the last offset either table holds, and per session its first:
        records before them were never read by a writer, or left no trace."""
        partition_first: dict[TopicPartition, int] = {}
        session_first: dict[tuple[str, str], int] = {}
        last: dict[TopicPartition, int] = {}
        query = ('SELECT topic, "partition", session, min("offset") AS lo, max("offset") AS hi FROM t {} '
                 'GROUP BY topic, "partition", session')
        found = [self._changes.select(query.format("")),
                 self._violations.select(query.format(f"WHERE kind <> {sql_text(DATA_LOSS)} "
                                                      'AND "offset" IS NOT NULL'))]
        for table in found:
            for r in table.to_pylist():
                if r["topic"] not in topics or r["partition"] is None:
                    continue
                tp = (r["topic"], r["partition"])
                partition_first[tp] = min(r["lo"], partition_first.get(tp, r["lo"]))
                last[tp] = max(r["hi"], last.get(tp, r["hi"]))
                if r["session"] is not None:
                    key = (r["topic"], r["session"])
                    session_first[key] = min(r["lo"], session_first.get(key, r["lo"]))
        return partition_first, session_first, last

    def add(self, batch: list[KafkaRecord]) -> Discrepancy | None:
        """Hold a batch of records (any partitions, each in offset order) to the tables."""
        by_partition: dict[TopicPartition, list[KafkaRecord]] = defaultdict(list)
        for record in batch:
            by_partition[(record.topic, record.partition)].append(record)
        for tp, records in sorted(by_partition.items()):
            found = self._partition(tp, records)
            if found is not None:
                return found
        return None

    def _partition(self, tp: TopicPartition, records: list[KafkaRecord]) -> Discrepancy | None:
        lo, hi = self._cursor.get(tp, records[0].offset), records[-1].offset
        self._cursor[tp] = hi + 1
        first = self._partition_first.get(tp)
        checked = [r for r in records if first is not None and r.offset >= first]
        self.summary.before_start += len(records) - len(checked)
        if not checked:
            return None
        hours = ", ".join(sql_text(h) for h in sorted({hour_of(r.timestamp) for r in checked}))
        changes = self._rows(self._changes.select(
            f"SELECT {self._change_columns} FROM t WHERE hour IN ({hours}) AND {_at(tp, lo, hi)}"))
        recorded = self._rows(self._violations.select(
            f"SELECT session, kind, \"offset\", found_seq, value FROM t WHERE {_at(tp, lo, hi)}"))
        for record in checked:
            parsed = source_record(record, self.schema)
            verdict = judge(parsed, changes.pop(record.offset, []), recorded.pop(record.offset, []), self.names)
            if verdict.outcome == MISSING and self._awaited(parsed):
                self.summary.awaiting += 1
                continue
            if verdict.outcome is None or verdict.outcome == MISSING:
                return Discrepancy(verdict.table, str(verdict.detail), parsed.topic, parsed.group, parsed.seq,
                                   verdict.row_id)
            self.summary.outcomes[verdict.outcome] += 1
        return self._strays(tp, changes, recorded)

    def _awaited(self, record: SourceRecord) -> bool:
        """An update of a session before its first trace: a replay awaiting its snapshot skips it."""
        if record.error is not None or record.type == "snapshot" or record.group is None:
            return False
        first = self._session_first.get((record.topic, record.group))
        return first is None or record.offset < first

    @staticmethod
    def _rows(table: pa.Table) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in table.to_pylist():
            if row["offset"] is not None:
                out[row["offset"]].append(row)
        return out

    @staticmethod
    def _strays(tp: TopicPartition, changes: dict[int, list[dict[str, Any]]],
                recorded: dict[int, list[dict[str, Any]]]) -> Discrepancy | None:
        """Rows left at offsets where Kafka holds no committed record (a loss's rows aside)."""
        recorded = {o: rows for o, rows in recorded.items() if any(v["kind"] != DATA_LOSS for v in rows)}
        for table, left in ((ROW_CHANGES, changes), (VIOLATIONS, recorded)):
            if left:
                offset = min(left)
                row = left[offset][0]
                return Discrepancy(table, f"a row at partition {tp[1]} offset {offset}, where Kafka holds no "
                                   "committed record", tp[0], row.get("session"), row.get("seq", row.get("found_seq")),
                                   row.get("row_id"))
        return None

    def finish(self) -> Discrepancy | None:
        """The offsets after the last record read up to the writer's end: no row may lie there."""
        for tp, end in sorted(self.read_ends.items()):
            lo = self._cursor[tp]
            if lo >= end or self._last.get(tp, -1) < lo:
                continue
            where = _at(tp, lo, end - 1)
            found = self._strays(tp, self._rows(self._changes.select(f"SELECT * FROM t WHERE {where}")),
                                 self._rows(self._violations.select(
                                     f'SELECT session, kind, "offset", found_seq FROM t WHERE {where}')))
            if found is not None:
                return found
        return None

