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
    from workbench.smoke import local_s3
    from reconstructor.spark.engine import build_spark

    session = build_spark(
        "reconstructor-tests",
        s3=local_s3(),
        jars_dir=stack.jars_dir(),
        shuffle_partitions=4,
        conf={"spark.ui.enabled": "false", "spark.driver.memory": "3g"},
    )
    yield session
    session.stop()


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:10]
