"""The metrics endpoint and log, for real: a port this test listens on and scrapes, a file it reads;
and how their settings arrive (flag, environment, TOML) and fail (exit 2, one line)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reconstructor import settings as config
from reconstructor.cli.parser import build_parser
from reconstructor.errors import UsageError
from reconstructor.metrics.batch_metrics import BatchCounts
from reconstructor.metrics.export import MetricsExport
from tests.support.cli import scrape_metrics

FIXTURES = Path(__file__).parent / "fixtures"
BEHIND = json.loads((FIXTURES / "progress_behind.json").read_text())
CAUGHT_UP = json.loads((FIXTURES / "progress_caught_up.json").read_text())


def scrape(export: MetricsExport) -> dict[str, float]:
    return scrape_metrics(*export.address)


def test_the_endpoint_serves_counters_and_the_last_batchs_gauges_and_the_log_gets_a_line_a_batch(tmp_path):
    log = tmp_path / "metrics.jsonl"
    export = MetricsExport.open("127.0.0.1", _free_port(), str(log))
    try:
        before = scrape(export)
        assert before["reconstructor_records_read_total"] == 0
        assert "reconstructor_last_batch_id" not in before
        export.count(0, BatchCounts({"open": 4}, {"GAP": 1}))
        export.progressed(BEHIND)
        export.progressed(BEHIND)  # told twice (listener and the last look): counted once
        # PySpark's own progress object gives its runId as a UUID: still the same run.
        export.progressed({**BEHIND, "runId": uuid.UUID(BEHIND["runId"])})
        export.count(3, BatchCounts({"open": 2, "ended": 2}, resync_requests=2))
        export.progressed(CAUGHT_UP)
        after = scrape(export)
    finally:
        export.close()
    assert after["reconstructor_records_read_total"] == 48
    assert after["reconstructor_batches_total"] == 2
    assert after["reconstructor_last_batch_id"] == 3
    assert after['reconstructor_sessions_written_total{status="open"}'] == 6
    assert after['reconstructor_sessions_written_total{status="ended"}'] == 2
    assert after['reconstructor_violations_total{kind="GAP"}'] == 1
    assert after["reconstructor_resync_requests_total"] == 2
    assert after['reconstructor_kafka_lag{partition="1",topic="m24101-sensor-0"}'] == 0
    assert after["reconstructor_state_rows"] == 4
    assert after["reconstructor_state_memory_bytes"] == 2101440
    assert after["reconstructor_batch_duration_seconds"] == CAUGHT_UP["durationMs"]["triggerExecution"] / 1000
    assert after['reconstructor_state_store_metric{name="rocksdbTotalBytesWritten"}'] == 10064
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["batch_id"] for r in lines] == [0, 3]
    assert [r["kafka_lag_total"] for r in lines] == [88, 0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_is_opened_unless_asked():
    assert MetricsExport.open("127.0.0.1", None, None) is None


def test_a_port_in_use_or_a_log_that_cannot_be_opened_is_a_usage_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}"):
            MetricsExport.open("127.0.0.1", port, None)
    with pytest.raises(UsageError, match=r"--metrics-log .* cannot be opened for appending"):
        MetricsExport.open("127.0.0.1", None, str(tmp_path / "no-such-dir" / "m.jsonl"))
    with pytest.raises(UsageError, match="is not a port number"):
        MetricsExport.open("127.0.0.1", 70000, None)


def test_metrics_settings_come_from_flags_env_and_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('metrics_port = 9200\nmetrics_log = "/file.jsonl"\nmetrics_host = "0.0.0.0"\n')
    from_file = config.load(str(f), env={})
    assert (from_file.metrics_port, from_file.metrics_log, from_file.metrics_host) == (9200, "/file.jsonl", "0.0.0.0")
    from_env = config.load(str(f), env={"RECON_METRICS_PORT": "9300", "RECON_METRICS_LOG": "/env.jsonl"})
    assert (from_env.metrics_port, from_env.metrics_log) == (9300, "/env.jsonl")
    args = build_parser().parse_args(["run", "--metrics-port", "9400", "--metrics-log", "/flag.jsonl",
                                      "--metrics-host", "10.0.0.1"])
    flags = {k: v for k, v in vars(args).items() if k in config.SCALAR_SETTINGS and v is not None}
    from_flags = config.load(str(f), env={"RECON_METRICS_PORT": "9300"}, flags=flags)
    assert (from_flags.metrics_port, from_flags.metrics_log, from_flags.metrics_host) == (9400, "/flag.jsonl", "10.0.0.1")
    assert config.load(None, env={}).metrics_host == "127.0.0.1"
    assert config.load(None, env={}).metrics_port is None
    with pytest.raises(UsageError, match="metrics_port must be a whole number"):
        config.load(None, env={"RECON_METRICS_PORT": "http"})
    replay = build_parser().parse_args(["replay", "--from-last-snapshot", "--metrics-log", "/r.jsonl"])
    assert replay.metrics_log == "/r.jsonl"


def test_run_with_a_port_in_use_exits_2_with_one_line_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "reconstructor", "run", "--bootstrap-servers", "127.0.0.1:1",
             "--topic-pattern", "sensor-.*", "--output", str(tmp_path / "out"),
             "--checkpoint", str(tmp_path / "chk"), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"reconstructor: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: "
                     "Address already in use"], result.stderr


def test_the_grafana_dashboard_asks_only_for_metrics_the_endpoint_serves(tmp_path):
    export = MetricsExport.open("127.0.0.1", _free_port(), None)
    try:
        export.count(0, BatchCounts({"open": 1}, {"GAP": 1}))
        export.progressed(BEHIND)
        served = {re.split(r"[{ ]", name)[0] for name in scrape(export)}
    finally:
        export.close()
    dashboard = json.loads((Path(__file__).parents[2] / "grafana" / "reconstructor.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    asked = {name for e in exprs for name in re.findall(r"reconstructor_[a-z_]+", e)}
    assert asked and asked <= served, asked - served
