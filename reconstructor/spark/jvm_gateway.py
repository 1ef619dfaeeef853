"""The driver JVM as Py4J shows it: its packages and classes by name (``jvm_of(spark).org.apache...``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing pyspark is for the callers that start one
    from pyspark.sql import SparkSession


def jvm_of(spark: SparkSession) -> Any:
    """The driver JVM's Py4J view.  pyspark types it as optional (a stopped SparkContext has none);
    a session in use always has one."""
    view = spark.sparkContext._jvm
    if view is None:
        raise RuntimeError("the SparkSession's JVM is gone (the SparkContext was stopped)")
    return view
