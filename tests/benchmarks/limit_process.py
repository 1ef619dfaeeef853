"""The stateless limit as a process of its own, as a scheduler starts it: a SparkSession with the
reconstructor's jars and settings, Spark's Kafka source, the value cast to string, one Delta
append, ``availableNow``; then the process ends.

``python -m tests.benchmarks.limit_process --pattern REGEX --output URI --checkpoint URI``: the
scheduled benchmark (``scheduled_bench``) times this process whole, beside the reconstructor's.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pattern", required=True, help="the topics, as the reconstructor's --topic-pattern")
    p.add_argument("--output", required=True, help="the Delta table's location (a path or s3a://)")
    p.add_argument("--checkpoint", required=True)
    args = p.parse_args(argv)

    from pyspark.sql import functions as F

    from reconstructor.settings import layers
    from reconstructor.settings.model import default_jars_dir
    from reconstructor.spark.builder import build_spark

    # The reconstructor's settings from its RECON_* variables (the S3 endpoint), as the CLI reads them.
    settings = layers.load(flags={"topic_pattern": args.pattern, "output": args.output,
                                  "checkpoint": args.checkpoint})
    spark = build_spark("stateless-limit", s3=settings.s3,
                        jars_dir=settings.jars_dir or default_jars_dir())
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", settings.bootstrap_servers)
           .option("subscribePattern", args.pattern).option("startingOffsets", "earliest").load())
    query = (raw.select("topic", "partition", "offset", F.col("value").cast("string").alias("value"))
             .writeStream.format("delta").option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start(args.output))
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
