"""Sessions the tables hold at a later point than this query's batches: after a replay into a
run's tables, or in a run behind one, until it catches up.

Such a session's rows stay as they are and the ``sessions`` MERGE keeps its row (``AHEAD``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from reconstructor.contract.tables import SESSIONS, table_path
from reconstructor.contract.writer import TableState, furthest, reached_everywhere
from reconstructor.core.session_status import SessionStatus
from reconstructor.spark.sinks.history import committed_offsets, recorded_offsets
from reconstructor.spark.sinks.records import SESSION_INFO

#: The statuses in the order a session passes through them at one offset (open, then timed out,
#: then quarantined; an end is applied at its own offset).
_STATUS_ORDER = (SessionStatus.OPEN, SessionStatus.TIMED_OUT, SessionStatus.QUARANTINED, SessionStatus.ENDED)
_RANK = {s.value: i for i, s in enumerate(_STATUS_ORDER)}

#: Where a session record stands in its session's history: (last applied offset, status rank).
HistoryPoint = tuple[int, "int | None"]


def _history_point(side: str) -> tuple[str, str]:
    """Where a session record stands in its session's history, as a SQL pair: its last applied
    offset (none yet: -1), then its status's rank (``_STATUS_ORDER``)."""
    rank = " ".join(f"WHEN '{status}' THEN {i}" for status, i in _RANK.items())
    return f"coalesce({side}.last_offset, -1)", f"CASE {side}.status {rank} END"


def _at_or_after() -> str:
    (s_offset, s_rank), (t_offset, t_rank) = _history_point("source"), _history_point("target")
    return f"({s_offset} > {t_offset} OR ({s_offset} = {t_offset} AND {s_rank} >= {t_rank}))"


#: A session record that is at or after the ``sessions`` row's point in the session's history: only
#: such a record replaces the row (a re-run of a batch is at it; a replay into the tables, or a run
#: behind one, is before it until it catches up).
AHEAD = _at_or_after()


def history_point(last_offset: int | None, status: str | None) -> HistoryPoint:
    """``_history_point`` in Python, for the driver's own account of the MERGE (``fleet_seal``)."""
    return (-1 if last_offset is None else int(last_offset), _RANK.get(status or ""))


def at_or_after(source: HistoryPoint, target: HistoryPoint) -> bool:
    """``AHEAD`` in Python: SQL's NULL (an unknown status) at one offset is not ahead."""
    if source[0] != target[0]:
        return source[0] > target[0]
    return source[1] is not None and target[1] is not None and source[1] >= target[1]


def written_ahead(spark: SparkSession, output: str, checkpoint, states: list[TableState],
                  replay: bool) -> dict | None:
    """Where the tables may hold sessions past this query ({}: anywhere; each batch then checks,
    ``SessionsAhead.behind``), or None when they cannot: a replay may be anywhere; a run is behind
    only where a replay into its tables, recorded in their history, got further than its
    checkpoint."""
    if replay:
        return {}
    if not any(t.has_data and t.replays for t in states):
        return None  # no other driver ever wrote them
    written = furthest(recorded_offsets(spark, table_path(output, SESSIONS), None))
    if not written:
        return {}  # written by an earlier version: unknown, so checked
    reached = committed_offsets(spark, checkpoint)
    return None if reached and reached_everywhere(reached, written) else written


@dataclass
class SessionsAhead:
    """Where the tables may still hold sessions past this query (``written_ahead``), until a batch
    reaches past it."""

    spark: SparkSession
    output: str
    #: ({}: anywhere), None when nowhere.
    where: dict | None = None

    def behind(self, sessions: DataFrame, end: dict | None) -> DataFrame | None:
        """The (topic, session) keys of this batch's ``sessions`` the tables hold further on, else
        None; once the batch's ``end`` offsets reach past where the tables may be ahead, the next
        batches check nothing."""
        behind = self._behind(sessions) if self.where is not None else None
        if self.where and end and reached_everywhere(end, self.where):
            self.where = None  # caught up: from the next batch on, nothing is ahead
        return behind

    def _behind(self, sessions: DataFrame) -> DataFrame | None:
        """The keys of ``sessions`` that the ``sessions`` table holds at a later point of their
        history (``AHEAD``), else None: read once, before the tables are written, so the two MERGEs
        judge alike."""
        batch = sessions.select("topic", "session", F.col(f"{SESSION_INFO}.last_offset").alias("last_offset"),
                                F.col(f"{SESSION_INFO}.status").alias("status"))
        table = (self.spark.read.format("delta").load(table_path(self.output, SESSIONS))
                 .select("topic", "session", "last_offset", "status"))
        keys = (batch.alias("source").join(table.alias("target"), ["topic", "session"])
                .where(~F.expr(AHEAD)).select("topic", "session").collect())
        if not keys:
            return None
        return self.spark.createDataFrame([tuple(k) for k in keys], "topic STRING, session STRING")
