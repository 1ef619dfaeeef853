"""A session table as an Arrow IPC stream: the bytes kept in Spark's state store.

The stream carries its own schema, so a checkpoint written under an older row schema still loads
after a nullable column is added (the new column reads as null) or one is dropped.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from reconstructor.schema import RowSchema, SchemaError

_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def dump_table(table: pd.DataFrame, schema: RowSchema) -> bytes:
    """Serialise a session table (pandas, indexed by ``row_id``) to Arrow IPC bytes."""
    frame = table.reset_index()
    arrow = pa.Table.from_pandas(frame, schema=schema.arrow_schema(), preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(arrow)
    return sink.getvalue().to_pybytes()


def load_table(blob: bytes, schema: RowSchema) -> pd.DataFrame:
    """Read a session table back, evolving it to ``schema``.

    Columns the blob lacks come back null; columns the schema no longer has are dropped; a column
    whose type changed is cast when Arrow can do so without loss, else ``SchemaError``.
    """
    arrow = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
    target = schema.arrow_schema()
    if not arrow.schema.equals(target):
        arrow = _evolve(arrow, target, schema)
    # Times leave Arrow as naive UTC and longs as Int64: the frame is in the core's canonical
    # dtypes already (this runs for every touched session of every batch; coerce_columns would
    # scan it again).
    arrays = [col.cast(pa.timestamp(field.type.unit)) if pa.types.is_timestamp(field.type) else col
              for field, col in zip(target, arrow.columns)]
    naive = pa.Table.from_arrays(arrays, names=target.names)
    return naive.to_pandas(types_mapper=_nullable_types).set_index("row_id")


def _evolve(arrow: pa.Table, target: pa.Schema, schema: RowSchema) -> pa.Table:
    """A blob written under another row schema, brought to ``target``."""
    arrays = []
    for field in target:
        if field.name in arrow.column_names:
            column = arrow.column(field.name)
            if not column.type.equals(field.type):
                try:
                    column = column.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"state column {field.name!r} is {column.type} in the checkpoint and "
                        f"{field.type} in row schema {schema.name!r}: {exc}") from None
            arrays.append(column)
        else:
            arrays.append(pa.nulls(arrow.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _nullable_types(arrow_type: pa.DataType):
    if pa.types.is_int64(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_boolean(arrow_type):
        return pd.BooleanDtype()
    return None
