"""The metrics a fleet operator watches, from Spark progress reports recorded from a real run
(``fixtures/progress_*.json``: a first batch capped behind the broker, then the batch that caught up)."""

from __future__ import annotations

import json
from pathlib import Path

from reconstructor.metrics.batch_metrics import STATUSES, BatchCounts, RunTotals, batch_metrics, kafka_lag

FIXTURES = Path(__file__).parent / "fixtures"
BEHIND = json.loads((FIXTURES / "progress_behind.json").read_text())
CAUGHT_UP = json.loads((FIXTURES / "progress_caught_up.json").read_text())
TOPICS = ("m24101-sensor-0", "m24101-sensor-1")


def test_kafka_lag_is_the_latest_offset_minus_the_batchs_end_per_topic_partition():
    assert kafka_lag(BEHIND) == {(t, 0): 0 for t in TOPICS} | {(t, 1): 44 for t in TOPICS}
    assert kafka_lag(CAUGHT_UP) == {(t, p): 0 for t in TOPICS for p in (0, 1)}


def test_kafka_lag_reads_offsets_given_as_json_text_and_is_unknown_without_a_latest_offset():
    source = BEHIND["sources"][0]
    as_text = {"sources": [{**source, "endOffset": json.dumps(source["endOffset"]),
                            "latestOffset": json.dumps(source["latestOffset"])}]}
    assert kafka_lag(as_text) == kafka_lag(BEHIND)
    assert kafka_lag({"sources": [{**source, "latestOffset": None}]}) is None
    assert kafka_lag({}) is None


def test_a_batch_reports_its_records_duration_rate_and_state_store():
    m = batch_metrics(BEHIND)
    assert (m.batch_id, m.records_read) == (0, 40)
    assert m.duration_seconds == BEHIND["durationMs"]["triggerExecution"] / 1000
    assert m.records_per_second == BEHIND["processedRowsPerSecond"]
    assert (m.state_rows, m.state_memory_bytes) == (4, 2101440)
    assert m.state_metrics["rocksdbTotalBytesWritten"] == 7784
    assert not [name for name in m.state_metrics if "partition_" in name]  # one per shuffle partition: left out
    assert m.total_lag == 88


def test_a_rate_spark_leaves_out_of_its_json_is_zero():
    progress = {k: v for k, v in BEHIND.items() if k != "processedRowsPerSecond"}
    assert batch_metrics(progress).records_per_second == 0.0


def test_the_sinks_counts_give_sessions_by_status_and_violations_by_kind():
    counts = BatchCounts({"open": 3, "ended": 1, "quarantined": 1}, {"GAP": 1, "SKIPPED": 4, "DUPLICATE": 0})
    m = batch_metrics(CAUGHT_UP, counts)
    assert m.sessions == {"open": 3, "ended": 1, "timed_out": 0, "quarantined": 1}
    assert m.violations == {"GAP": 1, "SKIPPED": 4}
    assert batch_metrics(CAUGHT_UP).sessions == dict.fromkeys(STATUSES, 0)  # a batch that wrote nothing


def test_the_json_line_is_one_line_with_every_field_and_lag_shaped_like_kafka_offsets():
    line = batch_metrics(BEHIND, BatchCounts({"open": 4})).json_line()
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert set(record) == {"batch_id", "timestamp", "records_read", "duration_seconds", "records_per_second",
                           "kafka_lag", "kafka_lag_total", "sessions", "violations", "resync_requests",
                           "state_rows", "state_memory_bytes", "state_metrics"}
    assert record["resync_requests"] == 0
    assert record["kafka_lag"] == {t: {"0": 0, "1": 44} for t in TOPICS}
    assert record["kafka_lag_total"] == 88
    assert record["timestamp"] == BEHIND["timestamp"]
    assert record["sessions"]["open"] == 4


def test_run_totals_count_across_batches_and_keep_the_last_known_lag():
    totals = RunTotals()
    totals.add(batch_metrics(BEHIND, BatchCounts({"open": 4}, {"SNAPSHOT_DRIFT": 1})))
    totals.add(batch_metrics(CAUGHT_UP, BatchCounts({"open": 2, "ended": 2}, {"SNAPSHOT_DRIFT": 1, "GAP": 1}, 3)))
    assert (totals.batches, totals.records_read, totals.resync_requests) == (2, 48, 3)
    assert totals.sessions == {"open": 6, "ended": 2, "timed_out": 0, "quarantined": 0}
    assert totals.violations == {"SNAPSHOT_DRIFT": 2, "GAP": 1}
    assert totals.last.batch_id == 3 and totals.last.total_lag == 0
    unplanned = {**CAUGHT_UP, "batchId": 4, "sources": [{**CAUGHT_UP["sources"][0], "latestOffset": None}]}
    totals.add(batch_metrics(unplanned))
    assert totals.last.batch_id == 4 and totals.last.kafka_lag == kafka_lag(CAUGHT_UP)
