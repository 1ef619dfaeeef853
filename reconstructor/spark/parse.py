"""Kafka records to the core's flat input rows, with Spark's own JSON functions.

The value is parsed once into a VARIANT (``try_parse_json``), so every field's JSON type is known
(``schema_of_variant``) and checked exactly: a string where a double belongs, an unknown column or
a missing ``seq`` is not nulled silently but kept, with a reason in ``error``, for the state
function to fail on with ``MALFORMED`` naming the record.  Rows are exploded so that pandas gets
flat, typed columns (one row per message row) instead of nested objects.

Each field's JSON type is computed once into its own column and the checks refer to those
columns: one large nested expression would cost more to compile than to run.

Those checks are exhaustive and slow: Spark re-encodes a variant for every map, array and type
lookup.  So a message first takes a fast path, and only the ones it cannot vouch for are checked:

- ``schema_of_variant`` of the whole message (one walk; keys sorted; the rows' types merged, where
  any two JSON types that cannot both be valid merge to VARIANT and JSON null merges away) must
  match a pattern of only the known fields and columns with their accepted JSON types
  (``message_shape_pattern``);
- the message is read once more by ``from_json`` into typed columns (Jackson, compiled), and the
  checks the shape cannot carry (present fields, seq not negative, known type, parseable
  timestamps inside the range pandas carries, non-empty session and ids, op upsert or delete and
  never JSON null, no values on a delete, no rows on an end) run on those.

A vouched message takes its values from ``from_json``, which reads every value of an accepted JSON
type exactly as the checked path does.  Any other message takes the exhaustive path unchanged, so
the fast path can make a record cheaper but never change its result: ``parse_records(...,
fast_path=False)`` is the reference the tests compare it with.
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from reconstructor.contract.row_schema import RowSchema
from reconstructor.core.frames import VALUE
from reconstructor.spark.timestamps import rfc3339_timestamp

ENVELOPE_FIELDS = ("session", "seq", "type", "ts", "rows")
ROW_FIELDS = ("id", "op", "values")
# Fields whose JSON type is computed (cheap for a scalar); the object and array fields are checked
# by whether they cast to a map or an array, because ``schema_of_variant`` of a snapshot's rows
# walks every row, which costs more than parsing the JSON itself.
SCALAR_ENVELOPE_FIELDS = ("session", "seq", "type", "ts")
SCALAR_ROW_FIELDS = ("id", "op")
#: ``parse_records(nested_rows=True)``'s column: a vouched message's rows, unexploded.
NESTED_ROWS = "nested_rows"
#: The parse's own columns that share a frame with the row columns (besides the core's ``INPUT``):
#: a row column of one of these names would make each reference to it ambiguous, so none may take
#: one (``reconstructor.contract.row_schema.RESERVED_NAMES``).
ROW_STAGE_COLUMNS = ("group_session", NESTED_ROWS, "bad_key", "bad_value", "msg_ok", "env_error", "row_pair",
                     "row_variant", "typed_row", "row_fields", *(f"json_type_{f}" for f in SCALAR_ROW_FIELDS),
                     "has_values", "op_raw", "values_fields", "unknown_row_field", "unknown_column")
_INTEGER = "('TINYINT', 'SMALLINT', 'INT', 'BIGINT')"
_NUMBER = "('TINYINT', 'SMALLINT', 'INT', 'BIGINT', 'FLOAT', 'DOUBLE')"
# The times the pipeline carries: pandas holds a time as int64 nanoseconds since 1970 (about
# 1677-09-21..2262-04-11), and a Spark TIMESTAMP outside that range kills the Python worker that
# converts it.  Whole days inside it, in epoch microseconds (symmetric around 1970).
TS_RANGE_US = 9223286400000000
TS_RANGE_TEXT = "1677-09-22T00:00:00Z..2262-04-11T00:00:00Z"


def _nothing_after(text: str) -> str:
    """SQL: nothing but whitespace follows the JSON value that ``text`` starts with.

    Spark's JSON readers (Jackson) stop at the end of the first value and ignore the rest, so
    ``{...} {...}`` or ``{...}garbage`` would parse as its first object.  Wrapped as an array's one
    element, a valid value may only be followed by whitespace or by ``]`` (which closes the array
    early and hides the rest); wrapped as an object's member, only by whitespace or ``}``.  A text
    that passes both has nothing after its value.  Both reads only tokenize (no value is built).
    """
    return (f"coalesce(json_array_length(concat('[', {text}, ']')) = 1 "
            f"AND json_object_keys(concat('{{\"k\":', {text}, '}}')) IS NOT NULL, false)")


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
    constructing a ``Cast`` expression per value, which reads the SQL conf each time.  Strings and
    booleans are read as stored; timestamps are read as strings (``rfc3339_timestamp``) and numbers
    as their JSON text, then cast by Spark's compiled casts.  Values of the
    wrong JSON type become null here and are reported by the type checks.
    """
    ddl = ddl.lower()
    if ddl in ("string", "boolean"):
        return F.expr(f"try_variant_get({var}, '{path}', '{ddl}')")
    if ddl == "timestamp":
        return F.expr(rfc3339_timestamp(f"try_variant_get({var}, '{path}', 'string')"))
    return F.expr(f"try_cast(to_json(variant_get({var}, '{path}')) AS {ddl})")


def _has(var: str, name: str) -> Column:
    """The field is present and not JSON null."""
    return F.expr(f"variant_get({var}, '$.{name}') IS NOT NULL AND NOT is_variant_null(variant_get({var}, '$.{name}'))")


def _fast_or_checked(fast: str, checked: str | Column, name: str | None = None) -> Column:
    """The fast path's value for a vouched message, the checked path's otherwise (``name``: the
    column's name, which a ``checked`` column name gives by default)."""
    checked_col = F.col(checked) if isinstance(checked, str) else checked
    alias = name if name is not None else checked
    if not isinstance(alias, str):
        raise TypeError("a checked value given as a Column needs its name")
    return F.when(F.col("msg_ok"), F.expr(fast)).otherwise(checked_col).alias(alias)


def _typed_value(col) -> str:
    value = _typed_row_value(col.name)
    return rfc3339_timestamp(value) if col.type == "timestamp" else value


def _typed_row_value(name: str) -> str:
    """SQL: a column's value in the typed row (a timestamp as its string)."""
    return f"typed_row.`values`.`{name}`"


def _in_range(ts: str) -> str:
    """SQL: the TIMESTAMP ``ts`` is inside the range the pipeline carries."""
    return f"unix_micros({ts}) BETWEEN -{TS_RANGE_US} AND {TS_RANGE_US}"


def _out_of_range(what: str, ts: str, text: str) -> tuple[str, str]:
    """A check: the parsed TIMESTAMP ``ts`` is outside the range; the reason quotes ``text``."""
    return _outside_range(ts), _out_of_range_reason(what, text)


def _outside_range(ts: str) -> str:
    """SQL: the parsed TIMESTAMP ``ts`` is outside the range the pipeline carries."""
    return f"{ts} IS NOT NULL AND NOT {_in_range(ts)}"


def _out_of_range_reason(what: str, text: str) -> str:
    return f"concat('{what} ', substr({text}, 1, 60), ' is outside the supported range {TS_RANGE_TEXT}')"


def _first_error(checks: list[tuple[str, str]]) -> Column:
    """CASE WHEN <bad> THEN <reason> ... END: the first failing check's reason, else null."""
    return F.expr("CASE " + " ".join(f"WHEN {c} THEN {r}" for c, r in checks) + " END")


def _interpreted(col: Column) -> Column:
    """``col``, evaluated by Spark's interpreter instead of its generated code.

    For the error texts of the checked path: evaluated only for a malformed record, just before
    the query fails, and big enough that in generated code they pushed the stage's method past
    the 8000 bytes of bytecode beyond which the JVM stops compiling it (every record then ran
    interpreted bytecode).  A lambda body is never code-generated.
    """
    return F.element_at(F.transform(F.array(F.lit(0)), lambda _: col), 1)


# Why a message row is malformed, in the order both paths check it; each reason goes on from
# ``rows[<row_pos>``.  The checked path runs every check, the fast path only those its shape cannot
# rule out (``_vouched_row_error``): each with conditions of its own, both with these words.
#: A check's key: its name, or (``type`` or ``range``, a column's name).
CheckKey = str | tuple[str, str]

_ROW_REASONS: dict[CheckKey, str] = {
    "not_object": "'] is not an object'",
    "unknown_field": "concat('] has unknown field ', unknown_row_field)",
    "id": "'].id must be a non-empty string'",
    "op": "'].op must be upsert or delete'",
    "delete_with_values": "'] is a delete and carries values'",
    "values_not_object": "'].values must be an object'",
    "unknown_column": "concat('].values has unknown column ', unknown_column)",
}


def _row_reasons(schema: RowSchema, json_type, value_json, value_text) -> dict[CheckKey, str]:
    """``_ROW_REASONS`` then, for each column, its value's wrong JSON type and a time outside the
    range (keys ``("type", name)``, ``("range", name)``).  How a path reads a column: its JSON type
    (``json_type(name)``), its value as JSON (``value_json``), a time's text (``value_text``)."""
    reasons = dict(_ROW_REASONS)
    for col in schema.columns:
        reasons[("type", col.name)] = (
            f"concat('].values.{col.name} expects {col.type}, got ', {json_type(col.name)}, ' ', "
            f"substr({value_json(col.name)}, 1, 60))")
        if col.type == "timestamp":
            reasons[("range", col.name)] = _out_of_range_reason(f"].values.{col.name}", value_text(col.name))
        if col.type == "double":
            reasons[("range", col.name)] = f"'].values.{col.name} expects double, got a number past its range'"
    return reasons


def _first_row_error(reasons: dict, conditions: dict) -> Column:
    """``rows[<row_pos>`` and the reason of the first check (in ``reasons``' order) whose condition
    holds (a check without a condition is not run), else null.

    The prefix is built once rather than in every reason: the generated code of this expression is
    one method, and past 8000 bytes of bytecode the JVM stops compiling it."""
    checks = [(conditions[key], reason) for key, reason in reasons.items() if key in conditions]
    return F.concat(F.lit("rows["), F.col("row_pos").cast("string"), _first_error(checks))


def _value_json_type(name: str) -> str:
    """SQL: the JSON type of a column's value in the row variant (computed by ``_field_types``)."""
    return f"`json_type_values.{name}`"


def _infinite(value: str) -> str:
    """SQL: the DOUBLE ``value`` is an infinity: a JSON number past the largest double (JSON has no
    infinities), which no double column may take for it."""
    return f"abs({value}) = double('Infinity')"


def _present(json_type: str) -> str:
    return f"({json_type} IS NOT NULL AND {json_type} <> 'VOID')"


def _column_ok(col, json_type: str) -> str:
    if col.type == "double":
        return f"({json_type} IN {_NUMBER} OR {json_type} LIKE 'DECIMAL%')"
    if col.type == "long":
        return f"{json_type} IN {_INTEGER}"
    if col.type == "boolean":
        return f"{json_type} = 'BOOLEAN'"
    if col.type == "timestamp":
        return f"({json_type} = 'STRING' AND `{col.name}` IS NOT NULL)"
    return f"{json_type} = 'STRING'"


# How ``schema_of_variant`` prints each JSON type a column accepts (VOID is JSON null): never more
# than ``_column_ok`` accepts, so a match never lets through what the checks reject.
_SHAPE_TYPES = {
    "double": r"(?:TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)|VOID)",
    "long": "(?:TINYINT|SMALLINT|INT|BIGINT|VOID)",
    "boolean": "(?:BOOLEAN|VOID)",
    "string": "(?:STRING|VOID)",
    "timestamp": "(?:STRING|VOID)",
}


def _shape_name(name: str) -> str:
    """A key as ``schema_of_variant`` prints it (backquoted unless plain), escaped for a Java regex."""
    printed = name if re.fullmatch(r"[A-Za-z0-9_]+", name) else "`" + name.replace("`", "``") + "`"
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in printed)


def _fields(*alternatives: str) -> str:
    """One or more ``, ``-separated fields, each one of ``alternatives`` (keys never repeat)."""
    one = "|".join(alternatives)
    return f"(?:{one})(?:, (?:{one}))*"


def message_shape_pattern(schema: RowSchema) -> str:
    """The anchored regex that ``schema_of_variant`` of a vouched message matches."""
    column = [f"{_shape_name(c.name)}: {_SHAPE_TYPES[c.type]}" for c in schema.columns]
    row = _fields("id: STRING", "op: STRING", f"values: (?:VOID|OBJECT<(?:{_fields(*column)})?>)")
    return "^OBJECT<" + _fields(
        f"rows: (?:VOID|ARRAY<VOID>|ARRAY<OBJECT<{row}>>)",
        "seq: (?:TINYINT|SMALLINT|INT|BIGINT)", "session: STRING", "ts: STRING", "type: STRING",
    ) + ">$"


def _typed_rows_ddl(schema: RowSchema) -> str:
    """``from_json`` type of a message's rows: timestamps as strings (cast as the checked path casts
    them), ``op`` as a VARIANT, where JSON null and an absent op differ."""
    cols = ", ".join(f"`{c.name}`: {'STRING' if c.type == 'timestamp' else c.spark_ddl}"
                     for c in schema.columns)
    return f"ARRAY<STRUCT<id: STRING, op: VARIANT, `values`: STRUCT<{cols}>>>"


def _typed_ddl(schema: RowSchema) -> str:
    return f"STRUCT<session: STRING, seq: BIGINT, type: STRING, ts: STRING, rows: {_typed_rows_ddl(schema)}>"


def _vouched(schema: RowSchema) -> Column:
    """True for a message the fast path vouches for, else false: its shape matches and its
    envelope passes.  (Row checks the shape cannot carry run per row: ``_vouched_row_error``.)"""
    shape_ok = F.expr("schema_of_variant(parsed)").rlike(message_shape_pattern(schema))
    typed_ok = F.expr(
        "typed_message.session <> '' AND typed_message.seq >= 0 "
        "AND typed_message.type IN ('snapshot', 'update', 'end') "
        f"AND {_in_range(rfc3339_timestamp('typed_message.ts'))} "
        "AND NOT (typed_message.type = 'end' AND size(typed_message.rows) > 0)")
    return F.coalesce(shape_ok & typed_ok, F.lit(False))


def _vouched_row_error(schema: RowSchema) -> Column:
    """A vouched message's row error, from its ``typed_row``: the checks its shape cannot rule out."""
    op = "try_variant_get(typed_row.op, '$', 'string')"
    conditions: dict[CheckKey, str] = {
        "not_object": "typed_row IS NULL",
        "id": "typed_row.id IS NULL OR typed_row.id = ''",
        "op": f"typed_row.op IS NOT NULL AND coalesce({op} NOT IN ('upsert', 'delete'), true)",
        "delete_with_values": f"{op} <=> 'delete' AND typed_row.`values` IS NOT NULL",
    }
    for c in schema.columns:
        if c.type == "timestamp":  # the column itself is the string cast (``_typed_value``)
            conditions[("type", c.name)] = f"{_typed_row_value(c.name)} IS NOT NULL AND `{c.name}` IS NULL"
            conditions[("range", c.name)] = _outside_range(f"`{c.name}`")
        if c.type == "double":  # Jackson reads a number past the largest double as an infinity
            conditions[("range", c.name)] = _infinite(f"`{c.name}`")
    reasons = _row_reasons(schema, json_type=lambda name: "'STRING'",
                           value_json=lambda name: f"to_json(CAST({_typed_row_value(name)} AS VARIANT))",
                           value_text=_typed_row_value)
    return _first_row_error(reasons, conditions)


def parse_records(kafka: DataFrame, schema: RowSchema, *, fast_path: bool = True,
                  keep_values: bool = False, nested_rows: bool = False) -> DataFrame:
    """Columns: topic, group_session, then ``reconstructor.core.frames.INPUT`` and the row columns;
    with ``keep_values``, then ``VALUE``: the record's raw Kafka value (bad bytes replaced) on its
    first row only, for the ``violations`` table of quarantine mode.

    ``fast_path=False`` runs every check on every record: the reference the tests compare with.

    ``nested_rows`` (the JVM engine's input) leaves a vouched message unexploded: one row, its
    ``row_pos`` null, its rows as ``from_json`` read them in ``NESTED_ROWS`` and its ``error`` the
    record's own only.  The step that takes it runs ``_vouched_row_error``'s checks itself, with the
    same words (``reconstructor.jvm.NestedRows``): a stateful operator's cost grows with its input
    rows, and a message's rows are what the explode multiplies.  A message the fast path does not
    vouch for is exploded and checked here as without it.
    """
    env = _read_messages(_kafka_text(kafka), schema, fast_path)
    env = _row_arrays(_checked_envelope(env), schema, nested_rows)
    rows = _row_values(_explode_rows(env, keep_values, nested_rows), schema)
    return _output(rows, schema, _row_error(schema), keep_values, nested_rows)


def _kafka_text(kafka: DataFrame) -> DataFrame:
    """The Kafka columns, with the key and value as text and whether each is valid UTF-8.

    A key or value that is not UTF-8 is an error of the record, whatever its JSON says: its bytes
    never reach pandas (where decoding them kills the worker).  The key is kept with each bad byte
    replaced, to group by; the value is dropped (``json`` is null)."""
    env = kafka.select(
        "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_ts"),
        F.expr("make_valid_utf8(CAST(key AS STRING))").alias("key"),
        F.expr("CAST(value AS STRING)").alias("text"),
        F.expr("NOT is_valid_utf8(CAST(key AS STRING))").alias("bad_key"),
    )
    env = env.select("*", F.expr("NOT is_valid_utf8(text)").alias("bad_value"))
    return env.select("*", F.expr("CASE WHEN bad_value THEN NULL ELSE text END").alias("json"))


def _read_messages(env: DataFrame, schema: RowSchema, fast_path: bool) -> DataFrame:
    """Each value read both ways: ``parsed`` (the VARIANT every check reads) and ``typed_message``
    (``from_json``, the fast path's values), then ``msg_ok`` (vouched for) and ``message_variant``,
    the checked path's input: null for a vouched message, so each check costs a null test."""
    env = env.select("*", F.expr(f"CASE WHEN {_nothing_after('json')} THEN try_parse_json(json) END").alias("parsed"),
                     F.from_json("json", _typed_ddl(schema)).alias("typed_message") if fast_path
                     else F.lit(None).cast(_typed_ddl(schema)).alias("typed_message"))
    env = env.select("*", (_vouched(schema) if fast_path else F.lit(False)).alias("msg_ok"))
    return env.select("*", F.expr("CASE WHEN msg_ok THEN NULL ELSE parsed END").alias("message_variant"))


def _checked_envelope(env: DataFrame) -> DataFrame:
    """The checked path's envelope: each field's JSON type and value, in columns of their own that
    ``_envelope_error`` refers to (one nested expression would cost more to compile than to run)."""
    return env.select(
        "*",
        F.expr("try_variant_get(message_variant, '$', 'map<string,variant>')").alias("message_fields"),
        *_field_types("message_variant", SCALAR_ENVELOPE_FIELDS, "json_type_"),
        _has("message_variant", "rows").alias("has_rows"),
        _get("message_variant", "$.session", "string").alias("session"),
        _get("message_variant", "$.seq", "bigint").alias("seq"),
        _get("message_variant", "$.type", "string").alias("type"),
        _get("message_variant", "$.ts", "timestamp").alias("event_ts"),
        F.expr("try_variant_get(message_variant, '$.rows', 'array<variant>')").alias("rows"),
    ).withColumn("unknown_field", _unknown_key("message_fields", ENVELOPE_FIELDS))


def _envelope_error() -> Column:
    """The checked path's envelope error (``_checked_envelope``'s columns), else null; interpreted,
    so that its texts stay out of the stage's generated code (``_interpreted``)."""
    return _interpreted(_first_error([
        ("message_variant IS NULL", "'value is not valid JSON'"),
        ("message_fields IS NULL",
         "concat('value is a JSON ', schema_of_variant(message_variant), ', not an object')"),
        ("unknown_field IS NOT NULL", "concat('unknown field ', unknown_field)"),
        ("json_type_session IS DISTINCT FROM 'STRING'", "'session must be a string'"),
        ("session = ''", "'session must be a non-empty string'"),
        (f"coalesce(json_type_seq NOT IN {_INTEGER}, true)", "'seq must be an integer'"),
        ("seq < 0", "'seq must not be negative'"),
        ("json_type_type IS DISTINCT FROM 'STRING' "
         "OR coalesce(type NOT IN ('snapshot', 'update', 'end'), true)",
         "concat('type must be snapshot, update or end, got ', "
         "coalesce(to_json(variant_get(message_variant, '$.type')), 'nothing'))"),
        ("json_type_ts IS DISTINCT FROM 'STRING' OR event_ts IS NULL",
         "'ts must be an RFC 3339 timestamp string'"),
        _out_of_range("ts", "event_ts", "try_variant_get(message_variant, '$.ts', 'string')"),
        ("has_rows AND rows IS NULL", "'rows must be an array'"),
        ("type = 'end' AND size(rows) > 0", "'an end message carries no rows'"),
    ]))


def _row_arrays(env: DataFrame, schema: RowSchema, nested_rows: bool) -> DataFrame:
    """The two row arrays to explode side by side.

    A vouched message explodes its typed rows (beside null variants), or with ``nested_rows``
    nothing (it keeps them whole in ``NESTED_ROWS``); a checked one its variant rows, each beside
    its typed twin where from_json has one (it is not used there)."""
    vouched_variants, vouched_typed = (("NULL", "NULL") if nested_rows else
                                       ("array_repeat(CAST(NULL AS VARIANT), size(typed_message.rows))",
                                        "typed_message.rows"))
    return env.select(
        "*",
        F.expr(f"CASE WHEN msg_ok THEN {vouched_variants} ELSE rows END").alias("row_variants"),
        F.expr(f"CASE WHEN msg_ok THEN {vouched_typed} ELSE slice(coalesce(typed_message.rows, "
               f"CAST(array() AS {_typed_rows_ddl(schema)})), 1, size(rows)) END").alias("typed_rows"),
    )


def _explode_rows(env: DataFrame, keep_values: bool, nested_rows: bool) -> DataFrame:
    """One row per message row (a message without rows keeps one, ``row_pos`` null), with the
    envelope's values from the path that vouched for or checked the message, and its error."""
    raw = [F.expr("make_valid_utf8(text)").alias(VALUE)] if keep_values else []
    nested = [F.expr("CASE WHEN msg_ok THEN typed_message.rows END").alias(NESTED_ROWS)] if nested_rows else []
    env = env.select("topic", "partition", "offset", "kafka_ts", "key", "bad_key", "bad_value", "msg_ok", *raw, *nested,
                     _fast_or_checked("typed_message.session", "session"),
                     # A seq that is no JSON integer (1.0, "7") is no seq: the record names none.
                     _fast_or_checked("typed_message.seq",
                                      F.expr(f"CASE WHEN json_type_seq IN {_INTEGER} THEN seq END"), "seq"),
                     _fast_or_checked("typed_message.type", "type"),
                     _fast_or_checked(rfc3339_timestamp("typed_message.ts"), "event_ts"),
                     F.when(~F.col("msg_ok"), _envelope_error()).alias("env_error"),
                     F.posexplode_outer(F.arrays_zip("row_variants", "typed_rows")).alias("row_pos", "row_pair"))
    return env.select("*", F.col("row_pair.row_variants").alias("row_variant"),
                      F.col("row_pair.typed_rows").alias("typed_row"))


def _row_values(env: DataFrame, schema: RowSchema) -> DataFrame:
    """Each row's id, op and column values from the path of its message, and for the checked path
    each field's JSON type and the first unknown field and column (``_checked_row_conditions``)."""
    rows = env.select(
        "*",
        F.expr("try_variant_get(row_variant, '$', 'map<string,variant>')").alias("row_fields"),
        *_field_types("row_variant", SCALAR_ROW_FIELDS, "json_type_"),
        _has("row_variant", "values").alias("has_values"),
        _fast_or_checked("typed_row.id", _get("row_variant", "$.id", "string"), "row_id"),
        _fast_or_checked("try_variant_get(typed_row.op, '$', 'string')", _get("row_variant", "$.op", "string"),
                         "op_raw"),
        F.expr("try_variant_get(row_variant, '$.values', 'map<string,variant>')").alias("values_fields"),
        *_field_types("row_variant", [f"values.{c}" for c in schema.names], "json_type_"),
        *[_fast_or_checked(_typed_value(c), _get("row_variant", f"$.values.{c.name}", c.spark_ddl), c.name)
          for c in schema.columns],
    )
    return rows.select(
        "*",
        _unknown_key("row_fields", ROW_FIELDS).alias("unknown_row_field"),
        _unknown_key("values_fields", schema.names).alias("unknown_column"),
    )


def _checked_row_conditions(schema: RowSchema) -> dict[CheckKey, str]:
    """The checked path's condition for each of ``_row_reasons``' checks, on ``_row_values``'
    columns (the fast path's own are ``_vouched_row_error``'s)."""
    conditions: dict[CheckKey, str] = {
        "not_object": "row_fields IS NULL",
        "unknown_field": "unknown_row_field IS NOT NULL",
        "id": "json_type_id IS DISTINCT FROM 'STRING' OR row_id = ''",
        "op": "json_type_op IS NOT NULL AND (json_type_op <> 'STRING' OR op_raw NOT IN ('upsert', 'delete'))",
        "delete_with_values": "op_raw = 'delete' AND has_values",
        "values_not_object": "has_values AND values_fields IS NULL",
        "unknown_column": "unknown_column IS NOT NULL",
    }
    for col in schema.columns:
        json_type = _value_json_type(col.name)
        conditions[("type", col.name)] = f"{_present(json_type)} AND NOT {_column_ok(col, json_type)}"
        if col.type == "timestamp":
            conditions[("range", col.name)] = _outside_range(f"`{col.name}`")
        if col.type == "double":  # the variant holds it as an infinity, whose JSON text casts to null
            conditions[("range", col.name)] = (f"{_present(json_type)} AND {_column_ok(col, json_type)} "
                                               f"AND coalesce({_infinite(f'`{col.name}`')}, true)")
    return conditions


def _row_error(schema: RowSchema) -> Column:
    """A row's error: its message's envelope error, else its own, each from the path that read it."""
    reasons = _row_reasons(
        schema, json_type=_value_json_type,
        value_json=lambda name: f"to_json(variant_get(row_variant, '$.values.{name}'))",
        value_text=lambda name: f"try_variant_get(row_variant, '$.values.{name}', 'string')")
    conditions = _checked_row_conditions(schema)
    checked = F.coalesce(F.col("env_error"), F.when(F.col("row_variant").isNotNull(),
                                                    _interpreted(_first_row_error(reasons, conditions))))
    vouched = F.when(F.col("row_pos").isNotNull(), _vouched_row_error(schema))
    return F.when(F.col("msg_ok"), vouched).otherwise(checked)


def _record_error() -> Column:
    """The record's own error, before its message's: a key or value that is not UTF-8, or a Kafka
    time past the range.  A producer's CreateTime (or a broker's LogAppendTime) past 2262 is valid
    Kafka but no time the tables carry: the record is malformed, and its time never reaches pandas."""
    return F.when(F.col("bad_key"), F.lit("Kafka key is not valid UTF-8")).when(
        F.col("bad_value"), F.lit("Kafka value is not valid UTF-8")).when(
        F.expr(f"NOT {_in_range('kafka_ts')}"),
        F.expr(f"concat('Kafka timestamp ', unix_millis(kafka_ts), ' ms is outside the supported range "
               f"{TS_RANGE_TEXT}')"))


def _output(rows: DataFrame, schema: RowSchema, error: Column, keep_values: bool, nested_rows: bool) -> DataFrame:
    """``parse_records``' columns.  A time outside the range is nulled beside its error, so that no
    conversion ever sees it; so is an infinity, which no JSON number is."""
    return rows.select(
        "topic",
        # Null when the record names no session (no session and no key): the violation then says
        # session=none rather than an empty name.
        F.expr("coalesce(nullif(session, ''), nullif(key, ''))").alias("group_session"),
        "partition", "offset",
        F.expr(f"CASE WHEN {_in_range('kafka_ts')} THEN kafka_ts END").alias("kafka_ts"),
        "key", "session", "seq", "type",
        F.expr(f"CASE WHEN {_in_range('event_ts')} THEN event_ts END").alias("event_ts"),
        "row_pos", "row_id",
        F.coalesce("op_raw", F.lit("upsert")).alias("op"),
        F.coalesce(_record_error(), error).alias("error"),
        *[F.expr(f"CASE WHEN {_in_range(f'`{c.name}`')} THEN `{c.name}` END").alias(c.name)
          if c.type == "timestamp" else
          F.expr(f"CASE WHEN NOT {_infinite(f'`{c.name}`')} THEN `{c.name}` END").alias(c.name)
          if c.type == "double" else c.name for c in schema.columns],
        *([F.expr(f"CASE WHEN coalesce(row_pos, 0) = 0 THEN {VALUE} END").alias(VALUE)] if keep_values else []),
        *([NESTED_ROWS] if nested_rows else []),
    )
