"""The stateful step's two engines (``--engine python|jvm``): the one a query runs, and the
checkpoint's record of the one it started with.

The engines' operators and state encodings differ (``applyInPandasWithState`` with an Arrow blob,
``flatMapGroupsWithState`` with the JVM's), so a checkpoint that has committed a batch continues
only under the engine that wrote it.  A checkpoint written before the choice existed is the Python
engine's.  The way over is a replay into the same output with a checkpoint of its own.

Without ``--engine`` a checkpoint continues under the engine it names, and a new one starts under
the JVM engine when its jar is on Spark's classpath (every install carries it), else under the
Python engine (``engine_for``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from reconstructor.contract.writer import CheckpointState
from reconstructor.core.step_spec import NO_START, StepSpec, StepStart
from reconstructor.errors import UsageError
from reconstructor.settings import Settings, StatefulEngine
from reconstructor.spark.checkpoint import checkpoint_state, read_checkpoint_file, write_checkpoint_file
from reconstructor.spark.jvm_engine import engine_jar_loaded, reconstruct_jvm
from reconstructor.spark.parse import parse_records
from reconstructor.spark.stateful import reconstruct

#: The checkpoint file (beside Spark's own) naming the engine the checkpoint was written by.
ENGINE_FILE = "reconstructor/engine"


def checkpoint_engine(spark: SparkSession, checkpoint: CheckpointState) -> StatefulEngine | None:
    """The engine a checkpoint's committed state belongs to; None when it has committed no batch."""
    if checkpoint.last_committed is None:
        return None
    text = read_checkpoint_file(spark, checkpoint.location, ENGINE_FILE)
    return StatefulEngine(text.strip()) if text else StatefulEngine.PYTHON


def engine_for(asked: StatefulEngine | None, written: StatefulEngine | None, jar_loaded: bool) -> StatefulEngine:
    """The engine a query runs: the one asked for; unasked, the one the checkpoint's committed
    state belongs to (so no checkpoint starts failing for want of the flag); for a new checkpoint,
    the JVM engine where its jar is loaded (it rebuilds a live fleet about twice as fast), else the
    Python engine, which needs no jar."""
    if asked is not None:
        return StatefulEngine(asked)
    if written is not None:
        return written
    return StatefulEngine.JVM if jar_loaded else StatefulEngine.PYTHON


def with_engine(spark: SparkSession, cfg: Settings) -> Settings:
    """``cfg`` with its engine chosen (``engine_for``): read from the checkpoint when not set."""
    if cfg.engine is not None:
        return cfg
    written = checkpoint_engine(spark, checkpoint_state(spark, cfg.need("checkpoint")))
    return cfg.model_copy(update={"engine": engine_for(None, written, written is None and engine_jar_loaded(spark))})


def chosen(engine: StatefulEngine | None) -> StatefulEngine:
    """``engine`` as ``with_engine`` chose it: a query is never built on an engine not chosen."""
    if engine is None:
        raise ValueError("the stateful step's engine is chosen (with_engine) before its query is built")
    return StatefulEngine(engine)


def refuse_other_engine(spark: SparkSession, checkpoint: CheckpointState, engine: StatefulEngine | None) -> None:
    """Refuse a checkpoint another engine wrote (exit 2, one line naming the way over)."""
    engine = chosen(engine)
    written = checkpoint_engine(spark, checkpoint)
    if written is not None and written != engine:
        raise UsageError(
            f"checkpoint {checkpoint.location} was written by the {written.value} engine and cannot continue "
            f"under --engine {engine.value} (their state differs): run with --engine {written.value}, or replay "
            f"into the same output with --engine {engine.value} and a new checkpoint")


def record_engine(spark: SparkSession, checkpoint: CheckpointState, engine: StatefulEngine | None) -> None:
    """Record ``engine`` in a checkpoint that has committed no batch yet (one that has keeps its own)."""
    if checkpoint_engine(spark, checkpoint) is None:
        write_checkpoint_file(spark, checkpoint.location, ENGINE_FILE, chosen(engine).value + "\n")


def parse_for(engine: StatefulEngine | None, kafka: DataFrame, schema, *, keep_values: bool) -> DataFrame:
    """The parse stage's records as ``engine``'s step takes them: the JVM engine checks and reads a
    vouched message's rows itself, so they reach it unexploded (``parse_records(nested_rows=True)``)."""
    return parse_records(kafka, schema, keep_values=keep_values,
                         nested_rows=chosen(engine) == StatefulEngine.JVM)


def reconstruct_with(engine: StatefulEngine | None, records: DataFrame, spec: StepSpec,
                     start: StepStart = NO_START) -> DataFrame:
    """The stateful step's output records under ``engine``, both configured by one spec."""
    if chosen(engine) == StatefulEngine.JVM:
        return reconstruct_jvm(records, spec, start)
    return reconstruct(records, spec, start)
