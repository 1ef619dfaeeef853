"""A replay's session seeds (``core.seed``): the sessions it will not rebuild from Kafka, as the
output's tables hold them, and their place in the replay's checkpoint.

Only the sessions in play are read: those of the partitions the replay plans, still within
``--state-retention`` of their last write, whose snapshot lies before their partition's start (or
who have none).  Their tables are folded from ``row_changes`` (the rows of a timed-out, quarantined
or ended session are gone from ``current_rows``), up to each session's last applied offset.
"""

from __future__ import annotations

import datetime as dt
import time

from delta.tables import DeltaTable
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import ROW_CHANGES, SESSIONS, table_path
from reconstructor.core.seed import NO_SEEDS, SessionSeed, SessionSeeds
from reconstructor.core.session_status import SessionStatus
from reconstructor.errors import ReconstructorError, error_line
from reconstructor.spark.checkpoint import read_checkpoint_file, write_checkpoint_file

#: The checkpoint file (beside Spark's own) that keeps a replay's seeds for the runs on it.
SEEDS_FILE = "reconstructor/session-seeds.json"

_SCALARS = ("partition", "status", "first_seq", "last_seq", "last_offset", "snapshot_seq", "snapshot_offset")


def read_session_seeds(spark: SparkSession, output: str, starts: dict[str, dict[str, int]],
                       retention: dt.timedelta, schema: RowSchema) -> SessionSeeds:
    """The seeds of the sessions of ``starts``' partitions (``{topic: {partition: start offset}}``)
    that the replay will not rebuild from Kafka; none for an output with no tables yet."""
    now_ms = int(time.time() * 1000)
    retention_ms = retention // dt.timedelta(milliseconds=1)
    path = table_path(output, SESSIONS)
    try:
        if not DeltaTable.isDeltaTable(spark, path) or not starts:
            return NO_SEEDS
        planned = spark.createDataFrame([(t, int(p), int(o)) for t, ps in starts.items() for p, o in ps.items()],
                                        "topic STRING, partition INT, start BIGINT")
        sessions = spark.read.format("delta").load(path)
        head = F.col("chain_head") if "chain_head" in sessions.columns else F.lit(None).cast("string")
        chosen = (sessions.join(F.broadcast(planned), ["topic", "partition"])
                  .where(F.col("snapshot_offset").isNull() | (F.col("snapshot_offset") < F.col("start")))
                  .where(F.unix_millis("updated_at") + F.lit(retention_ms) > F.lit(now_ms))
                  .select("topic", "session", *_SCALARS, F.unix_micros("started_ts").alias("started_us"),
                          F.unix_micros("last_event_ts").alias("last_event_us"), head.alias("chain_head"),
                          (F.unix_millis("updated_at") + F.lit(retention_ms)).alias("expires_ms"))
                  .collect())
        tables = _folded_tables(spark, output, [r for r in chosen if r["status"] != SessionStatus.ENDED.value],
                                schema)
    except Exception as exc:  # noqa: BLE001 - any failure here is the output's
        raise ReconstructorError(f"cannot read the sessions the replay starts from the tables under {output}: "
                                 f"{error_line(exc)}") from None
    names = tuple(tables.columns) if tables is not None else tuple(schema.names)
    held = tables.rows if tables is not None else {}
    return SessionSeeds(names, {(r["topic"], r["session"]): SessionSeed.from_tables(
        r.asDict(), held.get((r["topic"], r["session"]), {}), r["expires_ms"]) for r in chosen})


class _Tables:
    def __init__(self, columns: list[str], rows: dict):
        self.columns, self.rows = columns, rows


def _folded_tables(spark: SparkSession, output: str, chosen: list, schema: RowSchema) -> _Tables | None:
    """Each chosen session's table: its rows' last changes in Kafka order up to its last applied
    offset, deleted rows left out (times as epoch microseconds)."""
    if not chosen:
        return None
    changes = spark.read.format("delta").load(table_path(output, ROW_CHANGES))
    kinds = dict(changes.dtypes)
    names = [n for n in schema.names if n in kinds]
    keys = spark.createDataFrame([(r["topic"], r["session"], r["last_offset"]) for r in chosen],
                                 "topic STRING, session STRING, last_offset BIGINT")
    last = Window.partitionBy("topic", "session", "row_id").orderBy(
        F.col("offset").desc(), F.coalesce(F.col("row_pos"), F.lit(-1)).desc())
    values = [F.unix_micros(n).alias(n) if kinds[n] == "timestamp" else F.col(n) for n in names]
    rows = (changes.join(F.broadcast(keys), ["topic", "session"])
            .where(F.col("last_offset").isNull() | (F.col("offset") <= F.col("last_offset")))
            .withColumn("_last", F.row_number().over(last)).where("_last = 1 AND op != 'delete'")
            .select("topic", "session", "row_id", *values).collect())
    tables: dict[tuple[str, str], dict[str, tuple]] = {}
    for r in rows:
        tables.setdefault((r["topic"], r["session"]), {})[r["row_id"]] = tuple(r[n] for n in names)
    return _Tables(names, tables)


def keep_seeds(spark: SparkSession, checkpoint: str, seeds: SessionSeeds) -> None:
    """Keep a replay's seeds in its checkpoint, for the runs that carry on from it."""
    write_checkpoint_file(spark, checkpoint, SEEDS_FILE, seeds.to_json())


def kept_seeds(spark: SparkSession, checkpoint: str) -> SessionSeeds | None:
    """The seeds a replay kept in ``checkpoint`` that still apply; None when it keeps none."""
    text = read_checkpoint_file(spark, checkpoint, SEEDS_FILE)
    if not text:
        return None
    try:
        seeds = SessionSeeds.from_json(text).live(int(time.time() * 1000))
    except ValueError as exc:
        raise ReconstructorError(f"checkpoint {checkpoint}: {SEEDS_FILE}: {exc}") from None
    return seeds if len(seeds) else None
