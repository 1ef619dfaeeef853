"""A smoke pipeline that proves the stack end to end.

confluent-kafka produces JSON records to two topics (and a decoy the pattern must not match);
Spark's Kafka source reads them with an anchored ``subscribePattern``; delta-spark writes them to a
Delta table on ``s3a://`` through the S3 endpoint; Spark reads the table back.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from pyspark.sql import functions as F

from reconstructor.settings import S3Settings
from reconstructor.spark.builder import build_spark
from reconstructor.spark.source import kafka_stream
from workbench import localstack
from workbench.producer import SensorProducer


@dataclass
class SmokeResult:
    produced: list[dict]
    read_back: list[dict]
    table: str
    seconds: float


def local_s3() -> S3Settings:
    return S3Settings(
        endpoint=localstack.s3_endpoint(),
        region=localstack.S3_REGION,
        access_key=localstack.S3_ACCESS_KEY,
        secret_key=localstack.S3_SECRET_KEY,
        path_style=True,
    )


def produce_json(bootstrap: str, topic: str, records: list[dict], key_field: str = "session") -> None:
    """Produce records as UTF-8 JSON, keyed by ``key_field``; raise on any delivery error."""
    producer = SensorProducer(bootstrap)
    for rec in records:
        producer.send(topic, str(rec[key_field]), json.dumps(rec).encode())
    producer.flush(30)


def run_smoke(records_per_topic: int = 50, run_id: str | None = None) -> SmokeResult:
    started = time.monotonic()
    run_id = run_id or uuid.uuid4().hex[:8]
    bootstrap = localstack.bootstrap_servers()
    topics = [f"smoke-{run_id}-a", f"smoke-{run_id}-b"]
    produced: list[dict] = []
    for topic in topics + [f"x-smoke-{run_id}-a"]:  # the decoy: matches unanchored, not anchored
        recs = [{"session": f"{topic}-s{i % 3}", "seq": i, "topic": topic}
                for i in range(records_per_topic)]
        produce_json(bootstrap, topic, recs)
        if topic in topics:
            produced.extend(recs)

    spark = build_spark("reconstructor-smoke", s3=local_s3(), jars_dir=localstack.jars_dir(),
                        conf={"spark.ui.enabled": "false"})
    root = f"s3a://{localstack.S3_BUCKET}/smoke/{run_id}"
    schema = "session STRING, seq LONG, topic STRING"
    stream = (
        kafka_stream(spark, bootstrap_servers=bootstrap, topic_pattern=f"smoke-{run_id}-(a|b)")
        .select(F.from_json(F.col("value").cast("string"), schema).alias("record"),
                F.col("topic").alias("kafka_topic"), "partition", "offset")
        .select("record.*", "kafka_topic", "partition", "offset")
    )
    query = (
        stream.writeStream.format("delta")
        .option("checkpointLocation", f"{root}/_checkpoint")
        .trigger(availableNow=True)
        .start(f"{root}/table")
    )
    query.awaitTermination()
    rows = spark.read.format("delta").load(f"{root}/table").collect()
    read_back = [{"session": r.session, "seq": r.seq, "topic": r.topic} for r in rows
                 if r.kafka_topic == r.topic]
    if len(read_back) != len(rows):
        raise RuntimeError("a record came back under a different topic than it was produced to")
    return SmokeResult(produced, read_back, f"{root}/table", time.monotonic() - started)


def main() -> int:
    print("starting the local stack ...")
    for line in localstack.up():
        print(" ", line)
    result = run_smoke()
    ok = sorted(map(json.dumps, result.produced)) == sorted(map(json.dumps, result.read_back))
    print(f"produced {len(result.produced)} records to 2 topics (plus a decoy topic), "
          f"read {len(result.read_back)} back from Delta table {result.table} "
          f"in {result.seconds:.1f}s: {'exact' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
