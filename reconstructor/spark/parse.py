"""Kafka records to the core's flat input rows, with Spark's own JSON functions.

The value is parsed once into a VARIANT (``try_parse_json``), so every field's JSON type is known
(``schema_of_variant``) and checked exactly: a string where a double belongs, an unknown column or
a missing ``seq`` is not nulled silently but kept, with a reason in ``error``, for the state
function to fail on with ``MALFORMED`` naming the record.  Rows are exploded so that pandas gets
flat, typed columns (one row per message row) instead of nested objects.

Each field's JSON type is computed once into its own column and the checks refer to those
columns: one large nested expression would cost more to compile than to run.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from reconstructor.schema import RowSchema

ENVELOPE_FIELDS = ("session", "seq", "type", "ts", "rows")
ROW_FIELDS = ("id", "op", "values")
# Fields whose JSON type is computed (cheap for a scalar); the object and array fields are checked
# by whether they cast to a map or an array, because ``schema_of_variant`` of a snapshot's rows
# walks every row and made parsing five times slower than parsing the JSON itself.
SCALAR_ENVELOPE_FIELDS = ("session", "seq", "type", "ts")
SCALAR_ROW_FIELDS = ("id", "op")
_INTEGER = "('TINYINT', 'SMALLINT', 'INT', 'BIGINT')"
_NUMBER = "('TINYINT', 'SMALLINT', 'INT', 'BIGINT', 'FLOAT', 'DOUBLE')"


def _sql_list(names) -> str:
    return "array(" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + ")"


def _unknown_key(map_col: str, allowed) -> Column:
    """The first key of a map column that is not in ``allowed``, else null."""
    return F.expr(f"try_element_at(filter(map_keys({map_col}), k -> NOT array_contains("
                  f"{_sql_list(allowed)}, k)), 1)")


def _field_types(var: str, names, prefix: str) -> list[Column]:
    """For each field, its JSON type in the VARIANT column ``var`` (SQL NULL when absent)."""
    return [F.expr(f"schema_of_variant(variant_get({var}, '$.{n}'))").alias(f"{prefix}{n}")
            for n in names]


def _get(var: str, path: str, ddl: str) -> Column:
    """``try_variant_get`` of a scalar, without Spark building a ``Cast`` for every value.

    ``variant_get`` casts a value whose stored type differs from the target (a small integer
    stored as TINYINT read as BIGINT, a decimal read as DOUBLE, a string read as TIMESTAMP) by
    constructing a ``Cast`` expression per value, which reads the SQL conf each time: a third of
    the parse in a profile.  Strings and booleans are read as stored; timestamps are read as
    strings and numbers as their JSON text, then cast by Spark's compiled casts.  Values of the
    wrong JSON type become null here and are reported by the type checks.
    """
    ddl = ddl.lower()
    if ddl in ("string", "boolean"):
        return F.expr(f"try_variant_get({var}, '{path}', '{ddl}')")
    if ddl == "timestamp":
        return F.expr(f"try_cast(try_variant_get({var}, '{path}', 'string') AS TIMESTAMP)")
    return F.expr(f"try_cast(to_json(variant_get({var}, '{path}')) AS {ddl})")


def _has(var: str, name: str) -> Column:
    """The field is present and not JSON null."""
    return F.expr(f"variant_get({var}, '$.{name}') IS NOT NULL AND NOT is_variant_null(variant_get({var}, '$.{name}'))")


def _first_error(checks: list[tuple[str, str]]) -> Column:
    """CASE WHEN <bad> THEN <reason> ... END: the first failing check's reason, else null."""
    return F.expr("CASE " + " ".join(f"WHEN {c} THEN {r}" for c, r in checks) + " END")


def _present(t: str) -> str:
    return f"({t} IS NOT NULL AND {t} <> 'VOID')"


def _column_ok(col, t: str) -> str:
    if col.type == "double":
        return f"({t} IN {_NUMBER} OR {t} LIKE 'DECIMAL%')"
    if col.type == "long":
        return f"{t} IN {_INTEGER}"
    if col.type == "boolean":
        return f"{t} = 'BOOLEAN'"
    if col.type == "timestamp":
        return f"({t} = 'STRING' AND `{col.name}` IS NOT NULL)"
    return f"{t} = 'STRING'"


def parse_records(kafka: DataFrame, schema: RowSchema) -> DataFrame:
    """Columns: topic, group_session, then ``reconstructor.core.frames.INPUT`` and the row columns."""
    env = kafka.select(
        "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_ts"),
        F.col("key").cast("string").alias("key"),
        F.expr("try_parse_json(CAST(value AS STRING))").alias("v"),
    )
    env = env.select(
        "*",
        F.expr("try_variant_get(v, '$', 'map<string,variant>')").alias("fields"),
        *_field_types("v", SCALAR_ENVELOPE_FIELDS, "t_"),
        _has("v", "rows").alias("has_rows"),
        _get("v", "$.session", "string").alias("session"),
        _get("v", "$.seq", "bigint").alias("seq"),
        _get("v", "$.type", "string").alias("type"),
        _get("v", "$.ts", "timestamp").alias("event_ts"),
        F.expr("try_variant_get(v, '$.rows', 'array<variant>')").alias("rows"),
    ).withColumn("unknown_field", _unknown_key("fields", ENVELOPE_FIELDS))

    env_error = _first_error([
        ("v IS NULL", "'value is not valid JSON'"),
        ("fields IS NULL", "concat('value is a JSON ', schema_of_variant(v), ', not an object')"),
        ("unknown_field IS NOT NULL", "concat('unknown field ', unknown_field)"),
        ("t_session IS DISTINCT FROM 'STRING'", "'session must be a string'"),
        (f"coalesce(t_seq NOT IN {_INTEGER}, true)", "'seq must be an integer'"),
        ("seq < 0", "'seq must not be negative'"),
        ("t_type IS DISTINCT FROM 'STRING' OR coalesce(type NOT IN ('snapshot', 'update', 'end'), true)",
         "concat('type must be snapshot, update or end, got ', "
         "coalesce(to_json(variant_get(v, '$.type')), 'nothing'))"),
        ("t_ts IS DISTINCT FROM 'STRING' OR event_ts IS NULL", "'ts must be an RFC 3339 timestamp string'"),
        ("has_rows AND rows IS NULL", "'rows must be an array'"),
        ("type = 'end' AND size(rows) > 0", "'an end message carries no rows'"),
    ])
    env = env.select("topic", "partition", "offset", "kafka_ts", "key", "session", "seq", "type",
                     "event_ts", env_error.alias("env_error"),
                     F.posexplode_outer("rows").alias("row_pos", "r"))

    rows = env.select(
        "*",
        F.expr("try_variant_get(r, '$', 'map<string,variant>')").alias("rfields"),
        *_field_types("r", SCALAR_ROW_FIELDS, "t_"),
        _has("r", "values").alias("has_values"),
        _get("r", "$.id", "string").alias("row_id"),
        _get("r", "$.op", "string").alias("op_raw"),
        F.expr("try_variant_get(r, '$.values', 'map<string,variant>')").alias("vfields"),
        *_field_types("r", [f"values.{c}" for c in schema.names], "t_"),
        *[_get("r", f"$.values.{c.name}", c.spark_ddl).alias(c.name) for c in schema.columns],
    )
    rows = rows.select(
        "*",
        _unknown_key("rfields", ROW_FIELDS).alias("unknown_row_field"),
        _unknown_key("vfields", schema.names).alias("unknown_column"),
    )
    checks = [
        ("rfields IS NULL", "concat('rows[', row_pos, '] is not an object')"),
        ("unknown_row_field IS NOT NULL",
         "concat('rows[', row_pos, '] has unknown field ', unknown_row_field)"),
        ("t_id IS DISTINCT FROM 'STRING' OR row_id = ''",
         "concat('rows[', row_pos, '].id must be a non-empty string')"),
        ("t_op IS NOT NULL AND (t_op <> 'STRING' OR op_raw NOT IN ('upsert', 'delete'))",
         "concat('rows[', row_pos, '].op must be upsert or delete')"),
        ("op_raw = 'delete' AND has_values",
         "concat('rows[', row_pos, '] is a delete and carries values')"),
        ("has_values AND vfields IS NULL",
         "concat('rows[', row_pos, '].values must be an object')"),
        ("unknown_column IS NOT NULL",
         "concat('rows[', row_pos, '].values has unknown column ', unknown_column)"),
    ]
    for col in schema.columns:
        t = f"`t_values.{col.name}`"
        checks.append((
            f"{_present(t)} AND NOT {_column_ok(col, t)}",
            f"concat('rows[', row_pos, '].values.{col.name} expects {col.type}, got ', {t}, ' ', "
            f"substr(to_json(variant_get(r, '$.values.{col.name}')), 1, 60))",
        ))
    error = F.coalesce(F.col("env_error"), F.when(F.col("r").isNotNull(), _first_error(checks)))
    return rows.select(
        "topic",
        F.coalesce("session", "key", F.lit("")).alias("group_session"),
        "partition", "offset", "kafka_ts", "key", "session", "seq", "type", "event_ts",
        "row_pos", "row_id",
        F.coalesce("op_raw", F.lit("upsert")).alias("op"),
        error.alias("error"),
        *schema.names,
    )
