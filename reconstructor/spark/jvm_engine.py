"""The JVM engine (``--engine jvm``): the stateful step as the Java ``flatMapGroupsWithState``
function of ``jvm/`` (``reconstructor.jvm.Engine``), loaded from the engine jar that ``make jars``
builds into the Spark jars folder.

It takes the parse stage's records with a vouched message's rows nested
(``parse_records(nested_rows=True)``: the Java function reads and checks them, which costs less
than the operator's handling one input row per message row) and with no null masks (the JVM reads a
long beside a null exactly), and returns the same records (``records_ddl``) as the
Python engine's ``stateful.reconstruct``, so the sinks take either.  The Python core is its
specification: a differential property test runs both over the same streams.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pyspark.sql import DataFrame

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import STATE_DDL, records_ddl
from reconstructor.core.chain import ChainSeed
from reconstructor.core.data_loss import DataLoss
from reconstructor.core.policy import STRICT, IntegrityPolicy
from reconstructor.core.seed import NO_SEEDS, SessionSeeds
from reconstructor.core.timestamps import RFC3339_PATTERN
from reconstructor.errors import UsageError
from reconstructor.spark.engine import PROJECT_JAR
from reconstructor.spark.jvm_gateway import jvm_of
from reconstructor.spark.parse import TS_RANGE_TEXT, TS_RANGE_US

#: The engine jar's file name in the Spark jars folder, and the version of it this code speaks to.
ENGINE_JAR = PROJECT_JAR  # the engine ships in the project's jar
ENGINE_VERSION = "3"


def engine_settings(schema: RowSchema, *, session_timeout_ms: int, await_snapshot: bool, state_retention_ms: int,
                    policy: IntegrityPolicy, losses: Mapping[tuple[str, int], list[DataLoss]] | None,
                    chain_key: str | None, chain_seeds: Mapping[tuple[str, str, int], ChainSeed] | None,
                    session_seeds: SessionSeeds | None = None) -> str:
    """What the JVM's ``EngineSettings`` reads, as JSON."""
    return json.dumps({
        "schema_name": schema.name,
        "columns": [[c.name, c.type] for c in schema.columns],
        "session_timeout_ms": int(session_timeout_ms),
        "state_retention_ms": int(state_retention_ms),
        "await_snapshot": bool(await_snapshot),
        "on_violation": policy.on_violation.value,
        "on_drift": policy.on_drift.value,
        "losses": [[d.topic, d.partition, d.first, d.earliest, d.detail]
                   for found in (losses or {}).values() for d in found],
        "chain_key": chain_key or None,
        "chain_seeds": [[t, s, int(q), seed.prev, seed.digest] for (t, s, q), seed in (chain_seeds or {}).items()],
        "session_seeds": json.loads((session_seeds or NO_SEEDS).to_json()),
        "state_ddl": STATE_DDL,
        "records_ddl": records_ddl(schema),
        "timestamp_pattern": RFC3339_PATTERN,
        "time_range_us": TS_RANGE_US,
        "time_range_text": TS_RANGE_TEXT,
    })


def reconstruct_jvm(records: DataFrame, schema: RowSchema, *, session_timeout_ms: int, await_snapshot: bool = False,
                    state_retention_ms: int, policy: IntegrityPolicy = STRICT,
                    losses: Mapping[tuple[str, int], list[DataLoss]] | None = None, chain_key: str | None = None,
                    chain_seeds: Mapping[tuple[str, str, int], ChainSeed] | None = None,
                    session_seeds: SessionSeeds | None = None) -> DataFrame:
    """Group the parsed records by ``(topic, session)`` and rebuild each on the JVM."""
    spark = records.sparkSession
    engine = _engine_class(spark)
    settings = engine_settings(schema, session_timeout_ms=session_timeout_ms, await_snapshot=await_snapshot,
                               state_retention_ms=state_retention_ms, policy=policy, losses=losses,
                               chain_key=chain_key, chain_seeds=chain_seeds, session_seeds=session_seeds)
    return DataFrame(engine.reconstruct(records._jdf, settings), spark)


def _engine_class(spark):
    """The engine's entry point in the driver's JVM; a clear error when its jar is not there."""
    jvm = jvm_of(spark)
    try:
        version = jvm.reconstructor.jvm.Engine.VERSION
    except Exception:  # noqa: BLE001 - py4j names a missing class in several ways
        version = None
    if not isinstance(version, str):
        raise UsageError(
            f"--engine jvm needs {ENGINE_JAR} on Spark's classpath: run 'make jars' (it builds it into "
            f".jars/spark), or ship it with the job; or run with --engine python")
    if version != ENGINE_VERSION:
        raise UsageError(f"{ENGINE_JAR} on the classpath is version {version}; this reconstructor needs "
                                 f"version {ENGINE_VERSION}: rebuild it with 'make jars'")
    return jvm.reconstructor.jvm.Engine
