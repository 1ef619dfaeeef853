"""A row schema's column names: none may be a column the tables or the pipeline's own frames hold
beside the row columns, in any case (Spark's names ignore case), nor appear twice."""

import json

import pytest

from reconstructor.contract import tables as output
from reconstructor.contract.row_schema import RESERVED_NAMES, RowSchema
from reconstructor.core import frames
from reconstructor.errors import SchemaError


def _schema(*names: str) -> dict:
    return {"name": "s", "columns": [{"name": n, "type": "double"} for n in names]}


@pytest.mark.parametrize("name", ["row_pos", "offset", "value", "key", "error", "topic", "partition",
                                  "session", "seq", "Topic", "ROW_ID", "Is_Latest", "hour", "updated_at",
                                  "group_session", "msg_ok"])
def test_a_column_named_as_one_of_the_pipelines_own_is_refused_naming_it_and_the_file(name):
    with pytest.raises(SchemaError) as err:
        RowSchema.from_dict(_schema("temperature", name), "schemas/mine.json")
    assert str(err.value).startswith(f"schemas/mine.json: column name {name!r} is reserved")


def test_every_column_beside_the_row_columns_in_the_contract_and_the_core_is_reserved():
    beside = {f[0] for fields in (output.RECORD_FIELDS, output.ROW_CHANGES_FIELDS, output.CURRENT_ROWS_FIELDS)
              for f in fields if f is not output.ROW_VALUES} | set(frames.INPUT) | {frames.VALUE}
    for name in sorted(beside):
        for variant in (name, name.upper()):
            with pytest.raises(SchemaError, match="is reserved"):
                RowSchema.from_dict(_schema(variant))


def test_the_reserved_names_are_exactly_the_columns_beside_the_row_columns():
    from reconstructor.spark.parse import ROW_STAGE_COLUMNS

    beside = {f[0] for fields in (output.RECORD_FIELDS, output.ROW_CHANGES_FIELDS, output.CURRENT_ROWS_FIELDS)
              for f in fields if f is not output.ROW_VALUES}
    beside |= {*frames.INPUT, frames.VALUE, *frames.CHANGE, *ROW_STAGE_COLUMNS}
    assert RESERVED_NAMES == {n.lower() for n in beside}


def test_names_only_the_tables_without_row_columns_hold_are_row_columns_like_any_other():
    # sessions and violations hold no row column: their names are free.
    schema = RowSchema.from_dict(_schema("status", "kind", "detail", "row_count", "last_seq", "Temperature"))
    assert schema.names == ["status", "kind", "detail", "row_count", "last_seq", "Temperature"]


def test_a_column_twice_in_two_cases_is_refused():
    with pytest.raises(SchemaError, match="column 'Temperature' appears twice"):
        RowSchema.from_dict(_schema("temperature", "Temperature"), "schemas/mine.json")


def test_loading_a_file_with_a_reserved_column_names_the_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_schema("temperature", "Offset")))
    with pytest.raises(SchemaError, match=f"^{path}: column name 'Offset' is reserved"):
        RowSchema.load(str(path))
