"""The contract's comments for the output tables (``reconstructor.contract.comments``): every table
and every column of each has one, and a table's current comments are compared column by column."""

from __future__ import annotations

from reconstructor.contract.comments import TABLE_COMMENTS, column_comment, missing_comments
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import (
    CURRENT_ROWS_FIELDS,
    ROW_CHANGES_FIELDS,
    SESSIONS,
    SESSIONS_FIELDS,
    TABLES,
    VIOLATIONS_FIELDS,
    column_names,
)
from reconstructor.spark.catalog import quoted, row_versions_sql

SCHEMA = RowSchema.load()
COLUMNS = {"row_changes": column_names(ROW_CHANGES_FIELDS, SCHEMA),
           "current_rows": column_names(CURRENT_ROWS_FIELDS, SCHEMA),
           "sessions": column_names(SESSIONS_FIELDS), "violations": column_names(VIOLATIONS_FIELDS)}


def test_every_table_and_every_column_has_the_contracts_comment():
    assert set(TABLE_COMMENTS) == set(TABLES) == set(COLUMNS)
    for table, columns in COLUMNS.items():
        for column in columns:
            assert column_comment(table, column, SCHEMA), (table, column)
    assert column_comment("current_rows", "temperature", SCHEMA) == (
        "row column temperature (double) of the row schema demo_sensor")
    assert column_comment("sessions", "no_such_column", SCHEMA) is None


def test_only_the_columns_whose_comment_differs_are_missing():
    current = {"topic": column_comment(SESSIONS, "topic", SCHEMA), "status": None, "row_count": "old words",
               "someone_elses": None}
    assert missing_comments(SESSIONS, current, SCHEMA) == {
        "status": column_comment(SESSIONS, "status", SCHEMA),
        "row_count": column_comment(SESSIONS, "row_count", SCHEMA)}


def test_catalog_names_are_quoted_part_by_part_and_the_view_reads_the_registered_change_log():
    assert quoted("main.sensors") == "`main`.`sensors`"
    assert quoted("we`ird") == "`we``ird`"
    sql = row_versions_sql("main.sensors", SCHEMA)
    assert "FROM `main`.`sensors`.`row_changes`" in sql and "`temperature`" in sql
    assert sql.endswith("WHERE op = 'upsert'")
