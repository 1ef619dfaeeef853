"""A session table as an Arrow IPC stream: the bytes kept in Spark's state store.

The stream carries its own schema, so a checkpoint written under an older row schema still loads
after a nullable column is added (the new column reads as null) or one is dropped.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from reconstructor.contract.row_schema import RowSchema
from reconstructor.errors import SchemaError

# A table of fewer rows than this is written uncompressed: for a few hundred rows zstd costs more
# than the rest of the dump and load together, and Spark compresses the state store's changelog
# (lz4) anyway.  Larger tables are compressed, to keep RocksDB's memory and files small.
COMPRESS_FROM_ROWS = 1000
_PLAIN = pa.ipc.IpcWriteOptions()
_COMPRESSED = pa.ipc.IpcWriteOptions(compression="zstd")


#: The stream's schema metadata key that holds the session's chain head (``core.chain``): kept
#: with the table rather than as a field of the state, whose struct a checkpoint fixes.  A blob
#: written before the chain existed has none.
CHAIN_HEAD = b"reconstructor.chain_head"


def dump_table(table: pd.DataFrame | pa.Table, schema: RowSchema, chain_head: str | None = None) -> bytes:
    """Serialise a session table (pandas, indexed by ``row_id``, or Arrow from ``read_table``) to
    Arrow IPC bytes, with the session's chain head when it has one."""
    arrow = table if isinstance(table, pa.Table) else to_arrow(table, schema)
    arrow = arrow.replace_schema_metadata({CHAIN_HEAD: chain_head.encode("ascii")} if chain_head else None)
    sink = pa.BufferOutputStream()
    options = _COMPRESSED if arrow.num_rows >= COMPRESS_FROM_ROWS else _PLAIN
    with pa.ipc.new_stream(sink, arrow.schema, options=options) as writer:
        writer.write_table(arrow)
    return cast(bytes, sink.getvalue().to_pybytes())


def chain_head(blob: bytes | None) -> str | None:
    """The chain head a blob carries (None: a blob written before the chain, or none)."""
    if blob is None:
        return None
    metadata = pa.ipc.open_stream(pa.py_buffer(blob)).schema.metadata or {}
    head = metadata.get(CHAIN_HEAD)
    return head.decode("ascii") if head else None


def to_arrow(table: pd.DataFrame, schema: RowSchema) -> pa.Table:
    """A session table (pandas, indexed by ``row_id``) as Arrow, ``row_id`` first."""
    return arrow_rows(table.index.to_numpy(), table, schema.arrow_schema())


def arrow_rows(ids: Any, values: Any, target: pa.Schema) -> pa.Table:
    """Session table rows as Arrow in ``target``: ``ids``, then each column's values from
    ``values`` (column name -> Series or array).  NaN, NaT and None become null.

    Column by column: pa.Table.from_pandas has a fixed cost per table (the index, pandas metadata)
    that outweighs the work for a session table's rows.
    """
    arrays = [pa.array(ids, pa.string())]
    arrays += [pa.array(values[field.name], type=field.type, from_pandas=True) for field in list(target)[1:]]
    return pa.Table.from_arrays(arrays, schema=target)


def row_ids(table: pd.DataFrame | pa.Table) -> np.ndarray:
    """A session table's row ids (the pandas index, or the Arrow table's first column)."""
    return table.column(0).to_numpy(zero_copy_only=False) if isinstance(table, pa.Table) else table.index.to_numpy()


def load_table(blob: bytes, schema: RowSchema) -> pd.DataFrame:
    """Read a session table back as pandas, evolving it to ``schema`` (see ``read_table``)."""
    return to_frame(read_table(blob, schema))


def read_table(blob: bytes, schema: RowSchema) -> pa.Table:
    """Read a session table back as Arrow, evolving it to ``schema``.

    Columns the blob lacks come back null; columns the schema no longer has are dropped; a column
    whose type changed is cast when Arrow can do so without loss, else ``SchemaError``.
    """
    arrow = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
    target = schema.arrow_schema()
    return arrow if arrow.schema.equals(target) else _evolve(arrow, target, schema)


def to_frame(arrow: pa.Table) -> pd.DataFrame:
    """An Arrow session table (``row_id`` first) as pandas, indexed by ``row_id``.

    Column by column, straight into the core's canonical dtypes (naive UTC times, Int64, boolean):
    Table.to_pandas gives other dtypes, which coerce_columns would then convert again.
    """
    columns = {field.name: _to_pandas(column, field.type)
               for field, column in zip(list(arrow.schema)[1:], arrow.columns[1:])}
    index = pd.Index(row_ids(arrow), dtype=object, name="row_id")
    return pd.DataFrame(columns, index=index)


def _to_pandas(column: pa.ChunkedArray, arrow_type: pa.DataType) -> Any:
    if pa.types.is_timestamp(arrow_type):
        # Nanoseconds, as pyspark hands times over: a table read from its blob and one updated from
        # a batch then have the same dtype, whichever way the session went.
        return column.cast(pa.timestamp("ns")).to_numpy()
    if pa.types.is_int64(arrow_type) or pa.types.is_boolean(arrow_type):
        values = column.fill_null(False if pa.types.is_boolean(arrow_type) else 0).to_numpy()
        mask = column.is_null().to_numpy()
        cls = pd.arrays.BooleanArray if pa.types.is_boolean(arrow_type) else pd.arrays.IntegerArray
        return cls(values, mask)
    return column.to_numpy(zero_copy_only=False)  # doubles (null: NaN) and strings (null: None)


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
