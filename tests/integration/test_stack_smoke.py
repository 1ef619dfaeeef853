"""The stack end to end: confluent-kafka -> Spark Kafka source (subscribePattern) -> Delta on S3A."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_records_cross_kafka_spark_and_delta_on_s3_exactly(stack, spark, run_id):
    from workbench.smoke import run_smoke

    result = run_smoke(records_per_topic=40, run_id=run_id)

    assert result.table.startswith("s3a://recon/")
    assert len(result.produced) == 80
    # Exactly the produced records of the two matching topics: none lost, none repeated, and
    # nothing from the decoy topic that an unanchored pattern would have matched.
    assert sorted(map(json.dumps, result.read_back)) == sorted(map(json.dumps, result.produced))
    # The table really lives on the S3 endpoint: its Delta log is there.
    keys = stack.s3_client().list_objects_v2(
        Bucket=stack.S3_BUCKET, Prefix=f"smoke/{run_id}/table/_delta_log/")
    assert any(k["Key"].endswith(".json") for k in keys.get("Contents", []))
