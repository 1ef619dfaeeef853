"""Bring the existing output tables to the row schema before the query starts.

The decision is ``reconstructor.contract.evolution``'s; this reads each existing table's columns from
its Delta log and runs the ``ALTER TABLE``.  Every table is checked before any is altered, so a
refused change leaves all of them as they were.
"""

from __future__ import annotations

import functools

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.evolution import TableColumn, TableEvolution, plan_evolution, wanted_columns
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    CURRENT_ROWS,
    CURRENT_ROWS_FIELDS,
    ROW_CHANGES,
    ROW_CHANGES_FIELDS,
    SESSIONS,
    SESSIONS_FIELDS,
    table_path,
)
from reconstructor.errors import ReconstructorError, UsageError, error_line
from reconstructor.spark.carried_seal import sealed_writer
from reconstructor.spark.catalog import path_ref
from reconstructor.spark.transactions import side_by_side

#: The tables whose columns follow the row schema or grew since they were first written (the
#: chain's, in ``row_changes`` and ``sessions``), and their field lists.
EVOLVED_TABLES = {ROW_CHANGES: ROW_CHANGES_FIELDS, CURRENT_ROWS: CURRENT_ROWS_FIELDS, SESSIONS: SESSIONS_FIELDS}


def evolve_tables(spark: SparkSession, output: str, schema: RowSchema) -> list[TableEvolution]:
    """Add the row schema's new columns to the existing tables under ``output``; refuse
    (``UsageError``) a change that would lose data before touching any table.  Returns what was
    done (tables that do not exist yet are created later with the full schema)."""
    def plan(name: str) -> TableEvolution | None:
        path = table_path(output, name)
        if not DeltaTable.isDeltaTable(spark, path):
            return None
        existing = [TableColumn(f.name, f.dataType.simpleString(), f.nullable)
                    for f in DeltaTable.forPath(spark, path).toDF().schema.fields]
        return plan_evolution(name, existing, wanted_columns(EVOLVED_TABLES[name], schema))

    try:
        plans = side_by_side(spark, *[functools.partial(plan, name) for name in EVOLVED_TABLES])
    except Exception as exc:  # any failure here is the output's
        raise ReconstructorError(
            f"cannot read the output tables under {output}: {error_line(exc)}") from exc
    plans = [p for p in plans if p is not None]
    for p in plans:
        if p.refusal is not None:
            raise UsageError(p.refusal)
    needed = [p for p in plans if p.needed]
    try:
        side_by_side(spark, *[functools.partial(_alter, spark, table_path(output, p.table), p) for p in needed])
    except Exception as exc:  # any failure here is the output's
        raise ReconstructorError(
            f"cannot add the row schema's new columns to the tables under {output}: {error_line(exc)}") from exc
    return needed


def _alter(spark: SparkSession, path: str, plan: TableEvolution) -> None:
    """The table's one ``ALTER TABLE``, carrying its fleet seal forward."""
    sealed_writer(spark, path).sql(plan.alter_sql(path_ref(path)))
