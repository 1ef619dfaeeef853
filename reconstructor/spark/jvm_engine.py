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
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession

from reconstructor.contract.tables import STATE_DDL, records_ddl
from reconstructor.core.step_spec import NO_START, StepSpec, StepStart
from reconstructor.core.timestamps import RFC3339_PATTERN
from reconstructor.errors import UsageError
from reconstructor.jars import ENGINE_JAR
from reconstructor.spark.jvm_gateway import jvm_of
from reconstructor.spark.parse import TS_RANGE_TEXT, TS_RANGE_US

#: The version of the engine jar this code speaks to.
ENGINE_VERSION = "4"


def engine_json(spec: StepSpec, start: StepStart = NO_START) -> str:
    """The step's spec and what its start adds, as the JSON document the JVM's ``EngineSettings``
    reads (versioned: the engine refuses another version's).  It carries the chain key: never log
    it."""
    schema = spec.schema
    return json.dumps({
        "version": ENGINE_VERSION,
        "schema_name": schema.name,
        "columns": [[c.name, c.type] for c in schema.columns],
        "session_timeout_ms": spec.session_timeout_ms,
        "state_retention_ms": spec.state_retention_ms,
        "await_snapshot": spec.awaits_snapshot(start),
        "on_violation": spec.policy.on_violation.value,
        "on_drift": spec.policy.on_drift.value,
        "losses": [[d.topic, d.partition, d.first, d.earliest, d.detail]
                   for found in start.losses.values() for d in found],
        "chain_key": spec.chain_key,
        "chain_seeds": [[t, s, int(q), seed.prev, seed.digest] for (t, s, q), seed in start.chain_seeds.items()],
        "session_seeds": json.loads(start.session_seeds.to_json()),
        "state_ddl": STATE_DDL,
        "records_ddl": records_ddl(schema),
        "timestamp_pattern": RFC3339_PATTERN,
        "time_range_us": TS_RANGE_US,
        "time_range_text": TS_RANGE_TEXT,
    })


def reconstruct_jvm(records: DataFrame, spec: StepSpec, start: StepStart = NO_START) -> DataFrame:
    """Group the parsed records by ``(topic, session)`` and rebuild each on the JVM."""
    spark = records.sparkSession
    engine = _engine_class(spark)
    return DataFrame(engine.reconstruct(records._jdf, engine_json(spec, start)), spark)


def jvm_reading(spark: SparkSession, spec: StepSpec, start: StepStart = NO_START) -> dict[str, Any]:
    """What the JVM engine's ``EngineSettings`` read from the spec's document, field by field
    (``Engine.describe``; the chain key as its SHA-256, never the key), for the test that holds
    the two sides equal."""
    return cast(dict[str, Any], json.loads(_engine_class(spark).describe(engine_json(spec, start))))


def engine_jar_loaded(spark: SparkSession) -> bool:
    """Whether the engine's classes are in the driver's JVM (whatever their version)."""
    try:
        return isinstance(jvm_of(spark).reconstructor.jvm.Engine.VERSION, str)
    except Exception:  # noqa: BLE001 - py4j names a missing class in several ways
        return False


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
