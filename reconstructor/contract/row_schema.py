"""The row schema: one JSON file under ``schemas/`` is the column list for the whole pipeline.

The same ``RowSchema`` gives the Arrow schema of the state blob, the pandas dtypes of the core, the
Spark types for parsing and the Delta column types, so the four can never disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa

from reconstructor.errors import SchemaError

#: Column types a row schema may use, and the JSON value types each accepts.
TYPES = ("string", "double", "long", "boolean", "timestamp")

_ARROW = {
    "string": pa.string(),
    "double": pa.float64(),
    "long": pa.int64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}

_SPARK_DDL = {
    "string": "STRING",
    "double": "DOUBLE",
    "long": "BIGINT",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP",
}


#: The names of the columns that sit beside the row columns, lower-case: in the tables that hold
#: row columns, the stateful step's records, the core's frames and the parse's stage.  Spark's
#: column names ignore case, so a row column named as one of them, in any case, would make every
#: reference to either ambiguous.  Declared here, below the modules that define those columns, so
#: that none of them is imported by the schema; a unit test holds it equal to their lists.
RESERVED_NAMES = frozenset({
    "bad_key", "bad_value", "chain_digest", "chain_prev", "env_error", "error", "event_ts",
    "group_session", "has_values", "hour", "info", "is_latest", "json_type_id", "json_type_op",
    "kafka_ts", "key", "msg_ok", "nested_rows", "offset", "op", "op_raw", "partition", "record", "row_fields",
    "row_id", "row_pair", "row_pos", "row_variant", "seq", "session", "topic", "type", "typed_row",
    "unknown_column", "unknown_row_field", "updated_at", "value", "values_fields",
})


DEFAULT_SCHEMA = "demo_sensor"


@dataclass(frozen=True)
class Column:
    name: str
    type: str

    @property
    def arrow_type(self) -> pa.DataType:
        return _ARROW[self.type]

    @property
    def spark_ddl(self) -> str:
        return _SPARK_DDL[self.type]


@dataclass(frozen=True)
class RowSchema:
    name: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of a session table: ``row_id`` then the typed columns, all nullable."""
        return pa.schema([pa.field("row_id", pa.string(), nullable=False)]
                         + [pa.field(c.name, c.arrow_type) for c in self.columns])

    def spark_ddl(self) -> str:
        return ", ".join(f"`{c.name}` {c.spark_ddl}" for c in self.columns)

    def empty_frame(self) -> Any:
        """An empty session table (pandas, indexed by row_id) with the schema's dtypes."""
        return self.arrow_schema().empty_table().to_pandas().set_index("row_id")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> RowSchema:
        if not isinstance(data, dict) or not isinstance(data.get("columns"), list):
            raise SchemaError(f"{source}: a row schema is an object with a 'columns' list")
        cols = []
        seen: dict[str, str] = {}  # lower-case name -> the name as first written
        for i, col in enumerate(data["columns"]):
            if not isinstance(col, dict) or not isinstance(col.get("name"), str):
                raise SchemaError(f"{source}: column {i} needs a 'name'")
            name, typ = col["name"], col.get("type")
            if typ not in TYPES:
                raise SchemaError(f"{source}: column {name!r} has type {typ!r}; use one of {', '.join(TYPES)}")
            if name.lower() in RESERVED_NAMES:
                raise SchemaError(f"{source}: column name {name!r} is reserved: the pipeline has a column "
                                  f"{name.lower()!r} of its own beside the row columns (names ignore case)")
            if not name.isidentifier():
                raise SchemaError(f"{source}: column name {name!r} must be a plain identifier")
            if name.lower() in seen:
                first = seen[name.lower()]
                raise SchemaError(f"{source}: column {name!r} appears twice"
                                  + (f" (as {first!r}: names ignore case)" if first != name else ""))
            seen[name.lower()] = name
            cols.append(Column(name, typ))
        if not cols:
            raise SchemaError(f"{source}: a row schema needs at least one column")
        return cls(str(data.get("name", Path(source).stem)), tuple(cols))

    @classmethod
    def load(cls, path_or_name: str | Path | None = None) -> RowSchema:
        """Load a row schema from a file path, or by name from the bundled ``schemas/``."""
        ref = str(path_or_name or DEFAULT_SCHEMA)
        path = Path(ref)
        if path.exists():
            text, source = path.read_text(), str(path)
        else:
            name = ref if ref.endswith(".json") else f"{ref}.json"
            bundled = resources.files("reconstructor.schemas").joinpath(name)
            if not bundled.is_file():
                raise SchemaError(f"row schema {ref!r}: no such file, and no bundled schema of that name")
            text, source = bundled.read_text(), f"schemas/{name}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{source}: not valid JSON ({exc})") from None
        return cls.from_dict(data, source)
