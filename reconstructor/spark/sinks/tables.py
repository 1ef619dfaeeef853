"""The four output tables under one output root: created with explicit schemas and properties,
in the background beside the query's start, and what each one's Delta log says of its writer.  Their
names and schemas are ``contract.tables``'."""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType
from pyspark.util import inheritable_thread_target

from reconstructor.contract.comments import TABLE_COMMENTS, column_comment
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    CURRENT_ROWS,
    ROW_CHANGES,
    SESSIONS,
    SESSIONS_DDL,
    STATS_COLUMNS,
    STATS_PROPERTY,
    TABLES,
    VIOLATIONS,
    VIOLATIONS_DDL,
    current_rows_ddl,
    row_changes_ddl,
    table_path,
)
from reconstructor.contract.writer import REPLAYS_PROPERTY, WRITER_PROPERTY, TableState, data_decides, replays_of
from reconstructor.errors import ReconstructorError, error_line
from reconstructor.spark.carried_seal import sealed_writer
from reconstructor.spark.catalog import path_ref
from reconstructor.spark.transactions import side_by_side


@dataclass
class OutputTables:
    """``row_changes``, ``current_rows``, ``sessions`` and ``violations`` under ``output`` (a local
    path or ``s3a://bucket/prefix``)."""

    spark: SparkSession
    output: str
    schema: RowSchema
    _creating: Future | None = field(default=None, init=False, repr=False)

    def path(self, name: str) -> str:
        return table_path(self.output, name)

    def ensure(self) -> None:
        """Create the tables with explicit schemas and properties when they do not exist."""
        specs = [
            (ROW_CHANGES, row_changes_ddl(self.schema), ["hour"],
             {"delta.appendOnly": "true"}),
            (CURRENT_ROWS, current_rows_ddl(self.schema), [], {}),
            (SESSIONS, SESSIONS_DDL, [], {}),
            (VIOLATIONS, VIOLATIONS_DDL, [], {"delta.appendOnly": "true"}),
        ]
        # Independent tables: create them side by side (mostly driver round trips).
        side_by_side(self.spark, *[functools.partial(self._create, *spec) for spec in specs])

    def _create(self, name: str, ddl: str, parts: list[str], props: dict[str, str]) -> None:
        """Create ``name``; one that exists (an earlier release's) takes the contract's statistics
        columns where it lacks them: one commit, before this writer's first."""
        stats = {STATS_PROPERTY: ",".join(STATS_COLUMNS[name])} if name in STATS_COLUMNS else {}
        existed = DeltaTable.isDeltaTable(self.spark, self.path(name))
        columns = StructType.fromDDL(ddl)
        if not isinstance(columns, StructType):
            raise TypeError(f"{name}'s DDL is not a list of columns: {ddl}")
        builder = (DeltaTable.createIfNotExists(self.spark).location(self.path(name))
                   .comment(TABLE_COMMENTS[name]).addColumns(commented(name, columns, self.schema)))
        if parts:
            builder = builder.partitionedBy(*parts)
        for key, value in {**props, **stats, "reconstructor.table": name,
                           "reconstructor.row_schema": self.schema.name}.items():
            builder = builder.property(key, value)
        builder.execute()
        # A table created just now has the property; one that existed may be an earlier release's.
        if stats and existed and self.properties(name).get(STATS_PROPERTY) != stats[STATS_PROPERTY]:
            sealed_writer(self.spark, self.path(name)).sql(f"ALTER TABLE {path_ref(self.path(name))} "
                           f"SET TBLPROPERTIES ('{STATS_PROPERTY}' = '{stats[STATS_PROPERTY]}')")

    def start_creating(self) -> None:
        """``ensure`` in the background; ``await_created`` and the first write wait for it.

        Creating (or finding) the tables is a few driver round trips each; in the background it
        overlaps the query's planning and its first batch instead of delaying them.
        """
        pool = ThreadPoolExecutor(1, thread_name_prefix="ensure-tables")
        self._creating = pool.submit(inheritable_thread_target(self.spark)(self.ensure))
        pool.shutdown(wait=False)

    def await_created(self) -> None:
        """Wait for ``start_creating``; its failure as one line."""
        if self._creating is None:
            return
        try:
            self._creating.result()
        except Exception as exc:  # any failure here is the output's
            raise ReconstructorError(
                f"cannot create the output tables under {self.output}: {error_line(exc)}") from exc

    def properties(self, name: str) -> dict[str, str]:
        """``name``'s table properties, read from its metadata alone (``DESCRIBE DETAIL`` would
        rebuild the table's whole state from its log first, about half a second a table)."""
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {path_ref(self.path(name))}").collect()
        return {row.key: row.value for row in rows}

    def states(self, query_id: str | None) -> list[TableState]:
        """Each existing table's writer and whether it holds data, from its Delta log alone.

        Whether a table holds data is read (from its whole state) only when it can decide
        something: not for a table whose writer is ``query_id`` (the checkpoint's query) and that
        no replay wrote, the case of every run after a writer's first."""
        try:
            found = side_by_side(self.spark, *[functools.partial(self._state, name, query_id) for name in TABLES])
        except Exception as exc:  # any failure here is the output's
            raise ReconstructorError(
                f"cannot read the output tables under {self.output}: {error_line(exc)}") from exc
        return [state for state in found if state is not None]

    def _state(self, name: str, query_id: str | None) -> TableState | None:
        path = self.path(name)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return None
        props = self.properties(name)
        writer, replays = props.get(WRITER_PROPERTY), replays_of(props.get(REPLAYS_PROPERTY))
        if not data_decides(writer, replays, query_id):
            return TableState(name, None, writer, replays)
        detail = DeltaTable.forPath(self.spark, path).detail().collect()[0]
        return TableState(name, (detail.numFiles or 0) > 0, writer, replays)


def commented(table: str, fields: StructType, schema: RowSchema) -> StructType:
    """``fields`` with each column's comment from the contract (``contract.comments``)."""
    return StructType([StructField(f.name, f.dataType, f.nullable,
                                   {**(f.metadata or {}), "comment": column_comment(table, f.name, schema)})
                       if column_comment(table, f.name, schema) else f for f in fields])
