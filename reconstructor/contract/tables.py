"""The output contract: the Delta tables, the stateful step's records, and a session's state.

One place says what the pipeline writes, so the Spark shell (the state function, the sinks, the
compaction, the state reader) and the commands agree on it by construction: the tables' names and
schemas, the kinds of record the stateful step emits, and the fields of a session's state as the
checkpoint, a session record and the ``sessions`` table hold them.  Those fields are derived from
the core's ``SessionState``, not listed again.  No Spark here: schemas are Spark SQL DDL text.

The column names, types and order are what existing tables and checkpoints hold: changing them
breaks every table and checkpoint written before.

``spark.sinks.tables`` creates these tables under an output root.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import typing
from typing import Any

import pandas as pd

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.state import SessionState

ROW_CHANGES, CURRENT_ROWS, SESSIONS, VIOLATIONS = "row_changes", "current_rows", "sessions", "violations"
TABLES = (ROW_CHANGES, CURRENT_ROWS, SESSIONS, VIOLATIONS)
#: Beside the tables: when the output's last compaction ended (``{"at": "<RFC 3339>"}``), so that a
#: run compacts only once ``compact_every`` has passed since.
COMPACTION_MARK = "_reconstructor/compaction.json"


def table_path(output: str, name: str) -> str:
    """The table ``name`` under the output root (a local path or ``s3a://bucket/prefix``)."""
    return f"{output.rstrip('/')}/{name}"


class RecordKind(str, enum.Enum):
    """What a row of the stateful step's output is, and so where the sinks write it."""

    CHANGE = "change"        # to row_changes (and, when ``is_latest``, to current_rows)
    CURRENT = "current"      # to current_rows only: a resumed session's rows back
    SESSION = "session"      # to sessions
    VIOLATION = "violation"  # to no table: the sink fails the micro-batch on it
    RECORDED = "recorded"    # to violations: a drift, or in quarantine mode a violation or a record set aside


# ------------------------------------------------------------------------------------------------
# A session's fields, derived from ``SessionState``.


@dataclasses.dataclass(frozen=True)
class SessionField:
    """One field of a session's state as the output holds it."""

    #: Its name in the state tuple and in a session record's ``info``.
    name: str
    #: Its Spark SQL type there.
    state_type: str
    #: The ``SessionState`` attribute it holds.
    attribute: str
    #: A time: epoch microseconds (UTC) in the state and the info, so they never depend on the
    #: engine's or the machine's time zone; a ``TIMESTAMP`` named as the attribute in ``sessions``.
    is_time: bool = False

    @property
    def column(self) -> str:
        """Its column in the ``sessions`` table."""
        return self.attribute if self.is_time else self.name

    @property
    def column_type(self) -> str:
        """Its type in the ``sessions`` table (``status`` is NOT NULL there: a session row always
        has one, and readers select on it)."""
        if self.is_time:
            return "TIMESTAMP"
        return f"{self.state_type} NOT NULL" if self.name == "status" else self.state_type


# A Kafka partition is an INT in every table and in the state; every other integer a BIGINT.
_INT_FIELDS = frozenset({"partition"})


def _session_fields(state_type: type) -> tuple[SessionField, ...]:
    """The state's fields, in the dataclass's order: an ``int`` is a BIGINT (a partition an INT), a
    string (or a string enum) a STRING, a time epoch microseconds ``<stem>_us``; the table is
    held as its ``row_count`` (so the timeout and the state reader need not decode it) and its
    Arrow blob ``table``, last."""
    hints = typing.get_type_hints(state_type)
    out: list[SessionField] = []
    for f in dataclasses.fields(state_type):
        hint = hints[f.name]
        kinds = set(typing.get_args(hint)) or {hint}
        if pd.DataFrame in kinds:
            out += [SessionField("row_count", "BIGINT", "row_count"), SessionField("table", "BINARY", f.name)]
        elif pd.Timestamp in kinds:
            out.append(SessionField(f.name.removesuffix("_ts") + "_us", "BIGINT", f.name, is_time=True))
        elif int in kinds:
            out.append(SessionField(f.name, "INT" if f.name in _INT_FIELDS else "BIGINT", f.name))
        elif isinstance(hint, type) and issubclass(hint, str):
            out.append(SessionField(f.name, "STRING", f.name))
        else:
            raise TypeError(f"{state_type.__name__}.{f.name}: no Spark type for {hint!r}")
    return tuple(out)


#: The session state as Spark's ``GroupState`` holds it: the tuple's fields in their order.
STATE_FIELDS = _session_fields(SessionState)
STATE_DDL = ", ".join(f"{f.name} {f.state_type}" for f in STATE_FIELDS)

#: The fields of a session as the ``sessions`` table and a session record show it: the state's
#: scalars with the times last, as the table has always held them (the blob stays in the state).
SESSION_FIELDS = tuple(sorted((f for f in STATE_FIELDS if f.name != "table"), key=lambda f: f.is_time))

#: A session record's fields travel as one JSON string in ``info`` (a violation record's text does
#: too): nine session columns would be nulls on every change row, paid for in pandas, in Arrow and
#: in the micro-batch cache.  The partition is a column of every record already.
SESSION_INFO_FIELDS = tuple(f for f in SESSION_FIELDS if f.name != "partition")
#: ``chain_head`` travels with them: it is kept in the state blob's metadata, not as a state field;
#: ``chain_seal`` too: it is made from the others (``core.seal``).
SESSION_INFO_DDL = ", ".join([*(f"{f.name} {f.state_type}" for f in SESSION_INFO_FIELDS), "chain_head STRING",
                              "chain_seal STRING"])


# ------------------------------------------------------------------------------------------------
# The schemas: one field list each, ``ROW_VALUES`` where the row schema's columns go.

ROW_VALUES = ("<row values>", "")

#: The stateful step's output: one flat row per record.
RECORD_FIELDS = (
    ("record", "STRING"), ("topic", "STRING"), ("session", "STRING"), ("partition", "INT"),
    ("offset", "BIGINT"), ("seq", "BIGINT"), ("type", "STRING"), ("row_pos", "INT"),
    ("row_id", "STRING"), ("op", "STRING"), ("is_latest", "BOOLEAN"), ROW_VALUES,
    ("event_ts", "TIMESTAMP"), ("kafka_ts", "TIMESTAMP"), ("chain_prev", "STRING"), ("chain_digest", "STRING"),
    ("info", "STRING"),
)

ROW_CHANGES_FIELDS = (
    ("topic", "STRING NOT NULL"), ("partition", "INT NOT NULL"), ("offset", "BIGINT NOT NULL"),
    ("session", "STRING NOT NULL"), ("seq", "BIGINT NOT NULL"), ("type", "STRING NOT NULL"),
    ("row_pos", "INT"), ("row_id", "STRING NOT NULL"), ("op", "STRING NOT NULL"), ROW_VALUES,
    ("event_ts", "TIMESTAMP"), ("kafka_ts", "TIMESTAMP"),
    # The message's digest and the one before it (``core.chain``); null on rows written before the
    # chain existed.
    ("chain_prev", "STRING"), ("chain_digest", "STRING"),
    ("hour", "STRING NOT NULL"),
)

#: ``row_changes``' partition column: the hour of a change's Kafka timestamp in UTC, as Spark's
#: ``date_format`` pattern (the sink's) and as Python's ``strftime`` one (the readers').
HOUR_PATTERN = "yyyy-MM-dd-HH"
HOUR_FORMAT = "%Y-%m-%d-%H"


def hour_of(ts: dt.datetime) -> str:
    """The ``hour`` a change with this Kafka timestamp lies in (a naive time is UTC)."""
    return (ts if ts.tzinfo is None else ts.astimezone(dt.UTC)).strftime(HOUR_FORMAT)


CURRENT_ROWS_FIELDS = (
    ("topic", "STRING NOT NULL"), ("session", "STRING NOT NULL"), ("row_id", "STRING NOT NULL"),
    ROW_VALUES, ("partition", "INT"), ("seq", "BIGINT NOT NULL"), ("offset", "BIGINT NOT NULL"),
    ("updated_at", "TIMESTAMP"),
)

#: The ``sessions`` table property a keyed run sets once it has sealed every row (``core.seal``):
#: from then on every row must carry a seal.
SEALED_PROPERTY = "reconstructor.sealed"

#: The ``sessions`` column that only the resync requests write.
RESYNC_REQUESTED_AT = "resync_requested_at"

SESSIONS_FIELDS = (
    ("topic", "STRING NOT NULL"), ("session", "STRING NOT NULL"),
    *[(f.column, f.column_type) for f in SESSION_FIELDS],
    ("updated_at", "TIMESTAMP"),
    ("chain_head", "STRING"),  # the digest of the session's last message with rows (``core.chain``)
    ("chain_seal", "STRING"),  # the row's HMAC with the chain's key (``core.seal``); null without a key
    # When the session's sensor was last asked for a snapshot (``--resync-topic``; ``core.resync``).
    (RESYNC_REQUESTED_AT, "TIMESTAMP"),
)


#: The Delta table property that names the columns a table keeps statistics on (min, max, nulls
#: per file), and those columns: a change's or a row's coordinates, what readers select on.  Delta
#: otherwise collects them on a table's first 32 columns, every row value and digest included, and
#: that work is on every write: about 0.2 s of a live-fleet batch's 90,000-row append.  Columns
#: without statistics are read as before; only file skipping on them is gone.  ``violations`` is
#: small and keeps Delta's default.
STATS_PROPERTY = "delta.dataSkippingStatsColumns"
STATS_COLUMNS = {
    ROW_CHANGES: ("topic", "partition", "offset", "session", "seq"),
    CURRENT_ROWS: ("topic", "session", "row_id"),
    SESSIONS: ("topic", "session"),
}


#: One row per record the pipeline refused or set aside without stopping: a violation or a record
#: skipped while its session is quarantined (quarantine mode), a snapshot drift (any mode).
VIOLATIONS_FIELDS = (
    ("topic", "STRING NOT NULL"), ("partition", "INT"), ("offset", "BIGINT"), ("session", "STRING"),
    ("kind", "STRING NOT NULL"), ("expected_seq", "BIGINT"), ("found_seq", "BIGINT"), ("detail", "STRING"),
    ("value", "STRING"), ("detected_at", "TIMESTAMP"),
)

#: A recorded row's ``info``: the violation as JSON (``ViolationRecord.to_json``).
VIOLATION_INFO_DDL = ("kind STRING, topic STRING, partition INT, offset BIGINT, session STRING, "
                      "expected_seq BIGINT, found_seq BIGINT, detail STRING, value STRING")


def ddl(fields: Any, schema: RowSchema | None = None) -> str:
    """The Spark SQL DDL of a field list (``schema`` fills in ``ROW_VALUES``)."""
    return ", ".join(_row_schema(schema).spark_ddl() if field is ROW_VALUES else f"{field[0]} {field[1]}"
                     for field in fields)


def _row_schema(schema: RowSchema | None) -> RowSchema:
    if schema is None:
        raise TypeError("a field list with the row values needs the row schema")
    return schema


def column_names(fields: Any, schema: RowSchema | None = None) -> list[str]:
    """The column names of a field list (``schema`` fills in ``ROW_VALUES``)."""
    names: list[str] = []
    for field in fields:
        names += _row_schema(schema).names if field is ROW_VALUES else [field[0]]
    return names


def records_ddl(schema: RowSchema) -> str:
    return ddl(RECORD_FIELDS, schema)


def row_changes_ddl(schema: RowSchema) -> str:
    return ddl(ROW_CHANGES_FIELDS, schema)


def current_rows_ddl(schema: RowSchema) -> str:
    return ddl(CURRENT_ROWS_FIELDS, schema)


SESSIONS_DDL = ddl(SESSIONS_FIELDS)
VIOLATIONS_DDL = ddl(VIOLATIONS_FIELDS)
