"""One ``applyInPandasWithState`` call the way pyspark 4.2's Python worker makes it, without a JVM.

The input is the Arrow stream the JVM sends (a group's rows plus its state column); pyspark's own
``ApplyInPandasWithStateSerializer`` turns it into pandas frames and a ``GroupState`` with the
settings the engine gives the worker (``RunnerConf``), pyspark's own wrapper calls the state
function, and the same serializer turns its frames and the new state back into the Arrow stream
the JVM reads.  What comes back is decoded from that stream: what Spark would write.
"""

from __future__ import annotations

import io
import json
from itertools import chain

import pyarrow as pa
from pyspark.serializers import CPickleSerializer
from pyspark.sql import types as T
from pyspark.sql.pandas.serializers import ApplyInPandasWithStateSerializer
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.worker import RunnerConf, wrap_grouped_map_pandas_udf_with_state

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import records_ddl
from tests.support.groupstate import VALUE_SCHEMA

_TYPES = {"INT": T.IntegerType(), "BIGINT": T.LongType(), "STRING": T.StringType(), "BINARY": T.BinaryType(),
          "BOOLEAN": T.BooleanType(), "DOUBLE": T.DoubleType(), "TIMESTAMP": T.TimestampType()}
_PICKLE = CPickleSerializer()


def struct_of(ddl: str) -> T.StructType:
    """A flat Spark SQL DDL as a StructType (``StructType.fromDDL`` needs a JVM)."""
    return T.StructType([T.StructField(name.strip("`"), _TYPES[kind])
                         for name, kind in (part.split() for part in ddl.split(","))])


def runner_conf(settings: dict[str, str] | None = None) -> RunnerConf:
    """The settings the JVM hands the worker: the session's UTC time zone, Spark's defaults else."""
    conf = RunnerConf()
    conf._conf.update({"spark.sql.session.timeZone": "UTC", **(settings or {})})
    return conf


def serializer(conf: RunnerConf) -> ApplyInPandasWithStateSerializer:
    """The serializer as ``pyspark.worker`` builds it for ``applyInPandasWithState``."""
    return ApplyInPandasWithStateSerializer(
        timezone=conf.timezone, safecheck=conf.safecheck, assign_cols_by_name=conf.assign_cols_by_name,
        prefer_int_ext_dtype=conf.prefer_int_ext_dtype, state_object_schema=VALUE_SCHEMA,
        arrow_max_records_per_batch=conf.arrow_max_records_per_batch,
        prefers_large_var_types=conf.use_large_var_types,
        int_to_decimal_coercion_enabled=conf.int_to_decimal_coercion_enabled)


def _state_column(n: int, chunks: list[tuple[int, int, bool]], state_object: bytes | None) -> pa.StructArray:
    """The JVM's state column of one Arrow batch: one entry per chunk of a group, then nulls."""
    props = json.dumps({"batchProcessingTimeMs": 0, "eventTimeWatermarkMs": -1,
                        "timeoutConf": GroupStateTimeout.ProcessingTimeTimeout, "hasTimedOut": False,
                        "watermarkPresent": False, "defined": state_object is not None, "updated": False,
                        "removed": False, "timeoutTimestamp": -1})
    entries = [{"properties": props, "keyRowAsUnsafe": b"", "object": state_object, "startOffset": start,
                "numRows": rows, "isLastChunk": last} for start, rows, last in chunks]
    entries += [None] * (n - len(entries))
    return pa.array(entries, type=pa.struct([
        ("properties", pa.string()), ("keyRowAsUnsafe", pa.binary()), ("object", pa.binary()),
        ("startOffset", pa.int32()), ("numRows", pa.int32()), ("isLastChunk", pa.bool_())]))


def call_group(fn, schema: RowSchema, batches: list[pa.RecordBatch], state_object: bytes | None = None,
               conf: RunnerConf | None = None) -> tuple[list[dict], bytes | None]:
    """Run the state function ``fn`` over one group whose rows arrive as ``batches`` (the grouping
    key first, then the function's input columns, as the JVM sends them; each batch one chunk of
    the group) with the pickled state ``state_object``.  Returns the output rows as Spark reads
    them (Python values) and the new pickled state (None when there is none)."""
    conf = conf or runner_conf()
    ser = serializer(conf)
    stream = io.BytesIO()
    writer = None
    for i, batch in enumerate(batches):
        state = _state_column(batch.num_rows, [(0, batch.num_rows, i == len(batches) - 1)], state_object)
        full = pa.RecordBatch.from_arrays(list(batch.columns) + [state],
                                          names=batch.schema.names + ["__state"])
        writer = writer or pa.ipc.new_stream(stream, full.schema)
        writer.write_batch(full)
    writer.close()
    stream.seek(0)

    return_type = struct_of(records_ddl(schema))
    udf = wrap_grouped_map_pandas_udf_with_state(fn, return_type, conf)

    def mapper(group):
        data, state = group
        frames = (columns for columns, _ in data)
        first = next(frames)
        keys = first[:2]
        values = (columns[2:] for columns in chain([first], frames))
        return udf(keys, values, state)

    out = io.BytesIO()
    ser.dump_stream(map(mapper, ser.load_stream(stream)), out)
    raw = out.getvalue()
    reader = pa.ipc.open_stream(pa.py_buffer(raw[4:]))  # after pyspark's START_ARROW_STREAM marker
    rows: list[dict] = []
    new_state = None
    for batch in reader:
        counts = batch.column(0).to_pylist()[0]
        rows += batch.column(1).slice(0, counts["dataCount"]).to_pylist()
        for state in batch.column(2).slice(0, counts["stateCount"]).to_pylist():
            new_state = state["object"]
    return rows, new_state


def state_tuple(state_object: bytes | None) -> tuple | None:
    """The state tuple from its pickled form (what the JVM would hand the next call)."""
    return None if state_object is None else tuple(_PICKLE.loads(state_object))
