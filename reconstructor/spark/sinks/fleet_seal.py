"""The fleet seal of each keyed batch (``core.fleet_seal``), kept on the driver from batch to batch.

A batch's seal is the one before it moved by what the batch changes: each session record that
replaces its ``sessions`` row (the MERGE's own rule, ``ahead.at_or_after``) swaps the row's seal
for the new one, a new session adds its seal, and each ``violations`` row the batch inserts adds
its member.  So the driver needs the seal each ``sessions`` row holds, read once, and the newest
seal of each table, read from their histories once; a batch then costs a few dict lookups, a
Spark job only when it records violations.

The seal goes into every commit of the batch (``batch_metadata``).  A batch run again finds its
own seal: where its ``sessions`` commit landed, the seal is that one (Delta skips the writes);
where only its ``violations`` commit did, the ``violations`` part is taken from it (Delta skips
that append, and a replay's insert would find the rows present).  Nothing the batch computes is
kept before its ``sessions`` commit returns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import SESSIONS, VIOLATIONS, table_path
from reconstructor.contract.writer import FleetRecord
from reconstructor.core.chain import ChainKey
from reconstructor.core.fleet_seal import VIOLATION_FIELDS, FleetSeal, TableSum, session_member, violation_member
from reconstructor.spark.carried_seal import fleet_state
from reconstructor.spark.sinks.ahead import HistoryPoint, at_or_after, history_point

__all__ = ["FleetLedger", "newest_fleet", "violations_sum"]


def newest_fleet(spark: SparkSession, path: str) -> FleetRecord | None:
    """The fleet seal in force in the table's log; None when it holds none (or there is no table)."""
    return fleet_state(spark, path).record


def violations_sum(rows: DataFrame, key: ChainKey) -> TableSum:
    """The ``violations`` rows of ``rows`` counted and their members summed, on the executors."""
    def members(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        total = TableSum()
        for frame in frames:
            plain = frame.astype(object).where(frame.notna(), None)  # type: ignore[call-overload]  # pandas-stubs' `other` leaves out None
            for row in plain.to_dict("records"):
                total = total.add(violation_member(key, row))
        yield pd.DataFrame({"rows": [total.rows], "total": [total.hex]})

    # As text: pandas holds a nullable BIGINT as a double, which a 64-bit seq does not survive.
    texts = rows.select(*[F.col(name).cast("string").alias(name) for name in VIOLATION_FIELDS])
    out = TableSum()
    for part in texts.mapInPandas(members, schema="rows LONG, total STRING").collect():
        out = out.plus(TableSum(int(part.rows), int(part.total, 16)))
    return out


@dataclass(frozen=True)
class _Pending:
    """A batch's seal, and the ``sessions`` rows it moves, until its ``sessions`` commit returns."""

    batch: tuple[str, int]
    seal: FleetSeal
    rows: dict[tuple[str, str], tuple[int, HistoryPoint]]


@dataclass
class FleetLedger:
    """The fleet seal of the output at ``output`` as its last committed batch left it."""

    spark: SparkSession
    output: str
    key: ChainKey
    _loaded: bool = field(default=False, init=False, repr=False)
    #: Per (topic, session): the seal's member its ``sessions`` row holds, and the row's point.
    _rows: dict[tuple[str, str], tuple[int, HistoryPoint]] = field(default_factory=dict, init=False, repr=False)
    _base: FleetSeal = field(default_factory=FleetSeal, init=False, repr=False)
    _base_batch: tuple[str, int] | None = field(default=None, init=False, repr=False)
    #: A batch whose ``violations`` commit landed after ``_base``, and its seal.
    _cut: tuple[tuple[str, int], FleetSeal] | None = field(default=None, init=False, repr=False)
    _pending: _Pending | None = field(default=None, init=False, repr=False)

    def load(self) -> None:
        """Read the ``sessions`` rows' seals and both tables' newest seals, once (after the tables
        exist and before the first batch writes)."""
        if self._loaded:
            return
        sessions = table_path(self.output, SESSIONS)
        for r in (self.spark.read.format("delta").load(sessions)
                  .select("topic", "session", "chain_seal", "last_offset", "status").collect()):
            self._rows[(r.topic, r.session)] = (session_member(r.chain_seal), history_point(r.last_offset, r.status))
        found = newest_fleet(self.spark, sessions)
        if found is not None:
            self._base = FleetSeal.from_json(found.fleet)
            self._base_batch = _batch_of(found)
        cut = newest_fleet(self.spark, table_path(self.output, VIOLATIONS))
        if cut is not None:
            seal, batch = FleetSeal.from_json(cut.fleet), _batch_of(cut)
            if seal.after == self._base.mac and batch is not None:
                self._cut = (batch, seal)
        self._loaded = True

    def seal(self, query: str, batch_id: int, sessions: Sequence[Row], violations: TableSum | None) -> FleetSeal:
        """The seal of batch ``batch_id`` of ``query``: ``sessions`` are its session records
        (topic, session, chain_seal, last_offset, status), ``violations`` what the rows it inserts
        into ``violations`` add (None: it inserts none)."""
        batch = (query, batch_id)
        if batch == self._base_batch:
            return self._base  # its sessions commit landed: Delta skips its writes
        total = self._base.sessions
        moved: dict[tuple[str, str], tuple] = {}  # the sessions this batch moves, as ``_rows`` holds them
        for r in sessions:
            key = (r.topic, r.session)
            member, point = session_member(r.chain_seal), history_point(r.last_offset, r.status)
            held = moved.get(key) or self._rows.get(key)
            if held is None:
                total = total.add(member)
            elif at_or_after(point, held[1]):
                total = total.remove(held[0]).add(member)
            else:
                continue  # the tables hold the session further on: the MERGE keeps its row
            moved[key] = (member, point)
        if self._cut is not None and self._cut[0] == batch:
            cut_violations = self._cut[1].violations  # its violations commit landed: Delta skips it
        else:
            cut_violations = self._base.violations.plus(violations or TableSum())
        sealed = self._base.next(total, cut_violations).sealed(self.key)
        self._pending = _Pending(batch, sealed, moved)
        return sealed

    def violations_committed(self) -> None:
        """The pending batch's ``violations`` commit returned."""
        if self._pending is not None:
            self._cut = (self._pending.batch, self._pending.seal)

    def sessions_committed(self) -> None:
        """The pending batch's ``sessions`` commit returned: its seal is the output's."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        self._rows.update(pending.rows)
        self._base, self._base_batch, self._cut = pending.seal, pending.batch, None


def _batch_of(record: FleetRecord) -> tuple[str, int] | None:
    return (record.query, record.batch) if record.query is not None and record.batch is not None else None
