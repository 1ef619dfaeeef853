"""pyspark's ``GroupState`` as its worker builds one for the state function, without a JVM."""

from __future__ import annotations

from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from reconstructor.contract.tables import STATE_DDL

_TYPES = {"INT": T.IntegerType(), "BIGINT": T.LongType(), "STRING": T.StringType(), "BINARY": T.BinaryType()}
# StructType.fromDDL needs a JVM; the state's DDL is flat and simple.
VALUE_SCHEMA = T.StructType([T.StructField(name, _TYPES[kind])
                             for name, kind in (part.split() for part in STATE_DDL.split(","))])


def group_state(value: tuple | None = None, timed_out: bool = False) -> GroupState:
    """A group's state holding ``value`` (a state tuple), or none; timed out or not."""
    return GroupState(keyAsUnsafe=b"", valueSchema=VALUE_SCHEMA,
                      optionalValue=None if value is None else T.Row(*value),
                      batchProcessingTimeMs=0, eventTimeWatermarkMs=-1,
                      timeoutConf=GroupStateTimeout.ProcessingTimeTimeout, hasTimedOut=timed_out,
                      watermarkPresent=False, defined=value is not None, updated=False,
                      removed=False, timeoutTimestamp=-1)
