"""Shared fixtures: the local stack (real Kafka broker and S3 endpoint) and one SparkSession.

Integration tests start the stack idempotently, so plain ``pytest`` works after ``make up`` or on
its own; ``make test`` stops the servers afterwards.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Spark's WARN lines (a stream falling behind its trigger, Delta's local checkpoints) would bury a
# failing assertion in CI's output; errors still show.
os.environ.setdefault("RECON_SPARK_LOG_LEVEL", "ERROR")
# The suite runs the reference engine, the Python core, wherever a test names no engine (a new
# checkpoint would get the JVM engine, whose jar the suite's classpath holds); the tests of the
# JVM engine name it, and the test of the default itself unsets this.
os.environ.setdefault("RECON_ENGINE", "python")
# The drivers (and executors) the tests start as processes compile with C1 alone: they live a
# minute or two over small data, two test workers at a time on two cores, and C2's second
# compilation of their hot code costs them more than it gives back (a quarter less CPU for the same
# run; docs/performance-log.md, 2026-11-28).  Spark prepends ``defaultJavaOptions`` to a run's own
# options; pyspark hands these arguments to the spark-submit that starts each driver, so the
# classpath stays the one the class archive was made with (a SPARK_CONF_DIR would change it, and
# the JVM would start without the archive).  The worker's own SparkSession (the ``spark`` fixture)
# lives for the whole run, runs thousands of batches, and does without.
SHORT_LIVED_JVMS = ("--conf spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1 "
                    "--conf spark.executor.defaultJavaOptions=-XX:TieredStopAtLevel=1 pyspark-shell")
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", SHORT_LIVED_JVMS)


# The files that take longest, with their seconds on a test worker in CI (rough: only their order
# counts).  On pytest-xdist workers (`make test`, with or without WITH_SLOW=1, and `make test-slow`:
# `--dist loadfile --no-loadscope-reorder`) the files are handed out in collection order, one at a time, and a worker
# takes its next file before it starts the last test of the one it has: the longest go first, so
# that the run ends on short files, and never on one worker finishing a file of four minutes while
# the other has nothing left.  (xdist's own order, most tests first, put the single-test files of
# minutes last.)  Files not named here follow, integration files before unit files.
LONG_FILES = {
    "test_replay_recovery.py": 480, "test_outages.py": 450, "test_crash_safety.py": 400,
    "test_sinks_compaction.py": 300, "test_wheel_jobs.py": 300, "test_standalone_cluster.py": 250,
    "test_upgrade.py": 225, "test_signals.py": 210, "test_demo.py": 210, "test_cli_output.py": 200,
    "test_engine_differential.py": 180, "test_reconstruct_pipeline.py": 150,
    "test_verify_property.py": 120, "test_metrics.py": 95, "test_quarantine.py": 90,
}


def _expected_seconds(item) -> int:
    path = item.path
    if path.name in LONG_FILES and path.parent.name == "integration":
        return LONG_FILES[path.name]
    return 30 if path.parent.name == "integration" else 1


def pytest_collection_modifyitems(config, items):
    """The longest files first (a stable sort: each file's tests keep their order)."""
    items.sort(key=lambda item: -_expected_seconds(item))


@pytest.fixture(scope="session")
def stack():
    """The local Kafka broker and S3 endpoint, started if they are not running."""
    from workbench import localstack

    try:
        localstack.up()
    except localstack.StackError as exc:
        pytest.fail(f"local stack: {exc}")
    return localstack


@pytest.fixture(scope="session")
def spark(stack):
    from reconstructor.spark.builder import build_spark
    from workbench.smoke import local_s3

    # The options of short-lived drivers stay out of this one, which lives as long as the worker.
    submit_args = (os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
                   if os.environ.get("PYSPARK_SUBMIT_ARGS") == SHORT_LIVED_JVMS else None)
    try:
        session = build_spark(
            "reconstructor-tests",
            s3=local_s3(),
            jars_dir=stack.jars_dir(),
            shuffle_partitions=4,
            conf={"spark.ui.enabled": "false", "spark.driver.memory": "3g"},
        )
    finally:
        if submit_args is not None:
            os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
    yield session
    session.stop()


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:10]
