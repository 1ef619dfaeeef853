"""``--catalog SCHEMA``: the four output tables registered by name in the SparkSession's catalog
(Spark's own, a Hive metastore, Glue, Unity Catalog) as external Delta tables at their output
paths, documented with the contract's comments, and the ``row_versions`` view beside them.

Registering is catalog metadata, not a Delta commit. The comments are: only the output's writer
sets them on tables an earlier release created (new tables are created with them), before its
stream starts, and only where they differ, so a run that finds them in place commits nothing.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from reconstructor.contract.comments import TABLE_COMMENTS, missing_comments
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import ROW_CHANGES, TABLES, table_path
from reconstructor.errors import ReconstructorError, UsageError, error_line
from reconstructor.spark.carried_seal import sealed_writer

#: The view of each row's versions over ``row_changes`` (the README's "history of a row").
ROW_VERSIONS = "row_versions"


def _backquoted(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


def quoted(name: str) -> str:
    """A catalog name (``catalog.schema`` or ``schema``, ``table``) as SQL, each part back-quoted."""
    return ".".join(_backquoted(part) for part in name.split("."))


def path_ref(path: str) -> str:
    """The Delta table at ``path`` as SQL names it (``delta.`s3a://...```)."""
    return "delta." + _backquoted(path)


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _same_location(registered: str, path: str) -> bool:
    def norm(p: str) -> str:
        p = p.rstrip("/")
        return p[len("file:"):].replace("///", "/") if p.startswith("file:") else p
    return norm(registered) == norm(path)


def _table_information(spark: SparkSession, ref: str) -> dict[str, str]:
    """The detailed information (``Location``, ``Comment``, ...) of the table SQL names ``ref``,
    read from its metadata (``DESCRIBE DETAIL`` would rebuild the table's whole state from its log
    first, about half a second a table)."""
    information, detailed = {}, False
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {ref}").collect():
        if row.col_name.startswith("# Detailed Table Information"):
            detailed = True  # past the columns, one of which may be named Comment
        elif detailed and row.col_name:
            information[row.col_name] = row.data_type
    return information


def table_comment(spark: SparkSession, path: str) -> str | None:
    """The comment of the Delta table at ``path``, None when it has none."""
    return _table_information(spark, path_ref(path)).get("Comment")


def comment_tables(spark: SparkSession, output: str, schema: RowSchema) -> int:
    """Set the contract's table and column comments where an existing table lacks them; how many
    Delta commits that made (none when they are in place)."""
    commits = 0
    for name in TABLES:
        path = table_path(output, name)
        table = DeltaTable.forPath(spark, path)
        ref = path_ref(path)
        current = {f.name: (f.metadata or {}).get("comment") for f in table.toDF().schema.fields}
        columns = missing_comments(name, current, schema)
        if columns:
            sealed_writer(spark, path).sql(f"ALTER TABLE {ref} ALTER COLUMN " +
                                           ", ".join(f"{quoted(c)} COMMENT {_sql_text(t)}" for c, t in columns.items()))
            commits += 1
        if table_comment(spark, path) != TABLE_COMMENTS[name]:
            sealed_writer(spark, path).sql(
                f"ALTER TABLE {ref} SET TBLPROPERTIES ('comment' = {_sql_text(TABLE_COMMENTS[name])})")
            commits += 1
    return commits


def register_tables(spark: SparkSession, catalog: str, output: str, schema: RowSchema, *,
                    replace: bool = False) -> list[str]:
    """Register the tables under ``output`` as ``catalog``.<table> (the schema created if absent),
    and the ``row_versions`` view; the names registered now (not before).

    A name registered at another location is refused (``UsageError``) unless ``replace``: then it
    is pointed here (after a replay into a new output). Dropping an external table's name leaves
    its files as they are."""
    try:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quoted(catalog)}")
        registered = []
        for name in TABLES:
            ident, path = f"{quoted(catalog)}.{quoted(name)}", table_path(output, name)
            if spark.catalog.tableExists(f"{catalog}.{name}"):
                location = _table_information(spark, ident)["Location"]
                if _same_location(location, path):
                    continue
                if not replace:
                    raise UsageError(f"--catalog {catalog}: {catalog}.{name} is registered at {location}, not at "
                                     f"{path}: pass --catalog-replace to point it here")
                spark.sql(f"DROP TABLE {ident}")
            spark.sql(f"CREATE TABLE {ident} USING DELTA LOCATION {_sql_text(path)}")
            registered.append(f"{catalog}.{name}")
        spark.sql(f"CREATE OR REPLACE VIEW {quoted(catalog)}.{quoted(ROW_VERSIONS)} "
                  f"COMMENT {_sql_text(ROW_VERSIONS_COMMENT)} AS {row_versions_sql(catalog, schema)}")
        return registered
    except UsageError:
        raise
    except Exception as exc:  # any failure here is the catalog's
        raise ReconstructorError(f"cannot register the output tables in the catalog as {catalog}: "
                                 f"{error_line(exc)}") from exc


ROW_VERSIONS_COMMENT = ("Each row's versions: a version holds for seqs from_seq <= seq < to_seq and event "
                        "times valid_from <= ts < valid_to (null: the row's value now).")


def row_versions_sql(catalog: str, schema: RowSchema) -> str:
    """The README's ``row_versions`` query over ``catalog``'s ``row_changes``."""
    columns = ", ".join(quoted(c) for c in schema.names)
    return (f"SELECT * FROM (SELECT topic, session, row_id, op, {columns}, seq AS from_seq, "
            f"LEAD(seq) OVER w AS to_seq, event_ts AS valid_from, LEAD(event_ts) OVER w AS valid_to "
            f"FROM {quoted(catalog)}.{quoted(ROW_CHANGES)} "
            f"WINDOW w AS (PARTITION BY topic, session, row_id ORDER BY seq, row_pos)) WHERE op = 'upsert'")
