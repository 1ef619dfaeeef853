"""An existing table against the row schema: new nullable columns are added where the DDL puts
them; a dropped column, a type change or a respelled name is refused with the column and the table
named; a table that already matches needs nothing."""

from __future__ import annotations

from reconstructor.contract.evolution import TableColumn, plan_evolution, wanted_columns
from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import CURRENT_ROWS_FIELDS, ROW_CHANGES_FIELDS

OLD = RowSchema.from_dict({"name": "s", "columns": [{"name": "temperature", "type": "double"},
                                                    {"name": "status", "type": "string"}]})


def _schema(*columns) -> RowSchema:
    return RowSchema.from_dict({"name": "s", "columns": [{"name": n, "type": t} for n, t in columns]})


def _table(fields, schema=OLD) -> list[TableColumn]:
    """The table as Delta reports it after creation from the DDL."""
    return list(wanted_columns(fields, schema))


def test_the_wanted_columns_follow_the_ddl_with_its_types_and_not_nulls():
    cols = wanted_columns(CURRENT_ROWS_FIELDS, OLD)
    assert [c.name for c in cols] == ["topic", "session", "row_id", "temperature", "status", "partition",
                                      "seq", "offset", "updated_at"]
    assert cols[0] == TableColumn("topic", "string", False)
    assert cols[3] == TableColumn("temperature", "double", True)
    assert cols[6] == TableColumn("seq", "bigint", False)


def test_a_table_that_matches_needs_nothing():
    for fields in (ROW_CHANGES_FIELDS, CURRENT_ROWS_FIELDS):
        plan = plan_evolution("row_changes", _table(fields), wanted_columns(fields, OLD))
        assert plan.refusal is None and plan.added == () and not plan.needed


def test_reordered_row_columns_need_nothing_because_every_write_names_its_columns():
    swapped = _schema(("status", "string"), ("temperature", "double"))
    plan = plan_evolution("current_rows", _table(CURRENT_ROWS_FIELDS), wanted_columns(CURRENT_ROWS_FIELDS, swapped))
    assert plan.refusal is None and not plan.needed


def test_new_nullable_columns_are_added_after_the_column_the_ddl_puts_before_them():
    new = _schema(("temperature", "double"), ("humidity", "double"), ("status", "string"),
                  ("reading_count", "long"))
    plan = plan_evolution("row_changes", _table(ROW_CHANGES_FIELDS), wanted_columns(ROW_CHANGES_FIELDS, new))
    assert plan.refusal is None and plan.needed
    assert [(a.column.name, a.column.type, a.column.nullable, a.after) for a in plan.added] == [
        ("humidity", "double", True, "temperature"), ("reading_count", "bigint", True, "status")]
    assert plan.alter_sql("delta.`/out/row_changes`") == (
        "ALTER TABLE delta.`/out/row_changes` ADD COLUMNS "
        "(`humidity` DOUBLE AFTER `temperature`, `reading_count` BIGINT AFTER `status`)")


def test_columns_added_one_after_another_chain_their_positions():
    new = _schema(("temperature", "double"), ("status", "string"), ("a", "boolean"), ("b", "timestamp"))
    plan = plan_evolution("current_rows", _table(CURRENT_ROWS_FIELDS), wanted_columns(CURRENT_ROWS_FIELDS, new))
    assert [(a.column.name, a.after) for a in plan.added] == [("a", "status"), ("b", "a")]
    assert plan.alter_sql("t").endswith("(`a` BOOLEAN AFTER `status`, `b` TIMESTAMP AFTER `a`)")


def test_a_column_dropped_from_the_schema_file_is_refused_naming_it_and_the_table():
    fewer = _schema(("temperature", "double"))
    plan = plan_evolution("current_rows", _table(CURRENT_ROWS_FIELDS), wanted_columns(CURRENT_ROWS_FIELDS, fewer))
    assert not plan.needed and plan.added == ()
    assert "'status'" in plan.refusal and "current_rows" in plan.refusal and "drops" in plan.refusal
    assert "\n" not in plan.refusal


def test_a_type_change_is_refused_even_a_widening_that_loses_precision():
    for old_type, new_type in (("long", "double"), ("double", "string"), ("string", "long")):
        old = _schema(("temperature", "double"), ("n", old_type))
        new = _schema(("temperature", "double"), ("n", new_type))
        plan = plan_evolution("row_changes", _table(ROW_CHANGES_FIELDS, old), wanted_columns(ROW_CHANGES_FIELDS, new))
        assert not plan.needed
        assert "column 'n' of table row_changes" in plan.refusal
        assert TableColumn.from_ddl("n", old.columns[1].spark_ddl).type in plan.refusal


def test_a_refusal_comes_before_any_column_is_added():
    changed = _schema(("temperature", "string"), ("status", "string"), ("extra", "double"))
    plan = plan_evolution("row_changes", _table(ROW_CHANGES_FIELDS), wanted_columns(ROW_CHANGES_FIELDS, changed))
    assert plan.refusal is not None and not plan.needed and plan.added == ()


def test_a_name_that_differs_only_in_case_is_refused_not_added():
    respelled = _schema(("Temperature", "double"), ("status", "string"))
    plan = plan_evolution("current_rows", _table(CURRENT_ROWS_FIELDS), wanted_columns(CURRENT_ROWS_FIELDS, respelled))
    assert "'temperature'" in plan.refusal and "'Temperature'" in plan.refusal and "current_rows" in plan.refusal


def test_a_missing_not_null_column_cannot_be_added_to_an_existing_table():
    table = [c for c in _table(ROW_CHANGES_FIELDS) if c.name != "seq"]
    plan = plan_evolution("row_changes", table, wanted_columns(ROW_CHANGES_FIELDS, OLD))
    assert "'seq'" in plan.refusal and "row_changes" in plan.refusal and "NOT NULL" in plan.refusal
