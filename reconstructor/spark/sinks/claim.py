"""Which writer the tables belong to: a writer is its checkpoint's query.

Before Kafka is read, a run refuses tables another writer holds (a takeover from a replay only at
or past where that writer got to); before its first write it records its query on the tables
(``reconstructor.writer``), and a replay adds its query to their replays instead.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

from reconstructor.contract.tables import TABLES
from reconstructor.contract.writer import (
    REPLAYS_PROPERTY,
    WRITER_PROPERTY,
    TableState,
    furthest,
    refusal,
    takeover_refusal,
    with_replay,
)
from reconstructor.errors import UsageError
from reconstructor.spark.carried_seal import sealed_writer
from reconstructor.spark.catalog import path_ref
from reconstructor.spark.sinks.history import committed_offsets, writer_offsets
from reconstructor.spark.sinks.query_id import QueryId
from reconstructor.spark.sinks.tables import OutputTables
from reconstructor.spark.transactions import side_by_side


@dataclass
class WriterClaim:
    """The writer claim on ``tables``; ``replay``: the claim of a replay, which may write any
    writer's tables and is recorded among their replays, not as their writer."""

    tables: OutputTables
    replay: bool
    #: What the tables recorded when checked, by table name.
    _recorded: dict[str, TableState] = field(default_factory=dict, init=False, repr=False)
    _claimed: bool = field(default=False, init=False, repr=False)
    _recording: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def check(self, checkpoint) -> list[TableState]:
        """Refuse (``UsageError``) to write tables another writer holds; the tables' states.

        ``checkpoint`` is the query's ``CheckpointState``; what the tables record is kept, so the
        first batch only records this writer where it is not recorded yet."""
        states = self.tables.states(checkpoint.query_id)
        self._recorded = {t.name: t for t in states}
        reason = refusal(checkpoint, states, self.tables.output, replay=self.replay)
        if reason is None and not self.replay:
            reason = self._takeover_refusal(checkpoint, states)
        if reason is not None:
            raise UsageError(reason)
        return states

    def _takeover_refusal(self, checkpoint, states: list[TableState]) -> str | None:
        """A run on a replay's checkpoint takes over only at or past where the tables' writer got
        to on every partition (tables of an earlier version record no offsets: not checked)."""
        writers = {t.writer for t in states if t.has_data and t.writer not in (None, checkpoint.query_id)
                   and checkpoint.query_id in t.replays}
        if not writers:
            return None
        writer = writers.pop()
        spark = self.tables.spark
        # Each table's last commit by the writer, however far back: a batch may have ended between
        # two tables.  Every batch commits to the live tables, so one of them holds its last.
        found = [writer_offsets(spark, self.tables.path(name), writer) for name in TABLES]
        written = furthest(f for f in found if f)
        if not written and None in found:
            return (f"the tables under {self.tables.output} no longer hold the commits of their writer, query "
                    f"{writer}, in their logs (older than delta.logRetentionDuration): how far it got cannot be "
                    f"told, so the checkpoint {checkpoint.location} cannot take over from it; replay into a new "
                    "output instead")
        if not written:
            return None
        return takeover_refusal(writer, written, checkpoint, committed_offsets(spark, checkpoint),
                                self.tables.output)

    def record(self, query: QueryId) -> None:
        """Before the first write: a run records its query as the tables' writer, a replay adds its
        query to the tables' replays (so a run may carry on from its checkpoint).  Once, whichever
        of the sinks' threads asks first (the background record or the first batch)."""
        with self._recording:
            self._record(query)

    def _record(self, query: QueryId) -> None:
        if self._claimed:
            return
        query_id = query.get()
        recorded = {name: self._recorded.get(name) or TableState(name, False, None) for name in TABLES}
        if self.replay:
            changes = {name: (REPLAYS_PROPERTY, with_replay(t.replays, query_id))
                       for name, t in recorded.items() if query_id not in t.replays}
        else:
            changes = {name: (WRITER_PROPERTY, query_id)
                       for name, t in recorded.items() if t.writer != query_id}

        def record(name):
            key, value = changes[name]
            path = self.tables.path(name)
            sealed_writer(self.tables.spark, path).sql(
                f"ALTER TABLE {path_ref(path)} SET TBLPROPERTIES ('{key}' = '{value}')")

        side_by_side(self.tables.spark, *[functools.partial(record, name) for name in changes])
        self._claimed = True
