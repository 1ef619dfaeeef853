"""A continuous ``run`` as an operator watches it: its Prometheus endpoint scraped while it runs
over a fleet on the shared stack, and its JSON-lines log read after it stopped."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import scrape_metrics, stop_run
from tests.support.pipeline import produce
from workbench.fleet import FleetSpec, inject, plan_fleet

pytestmark = pytest.mark.integration
PARTITIONS = 2
WAIT_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lags(samples: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k.startswith("reconstructor_kafka_lag{")}


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def _await_caught_up(port: int, records: int, proc, log: Path, partitions: int) -> dict[str, float]:
    """Scrape until the run has read ``records`` and every partition's lag is 0."""
    deadline = time.monotonic() + WAIT_S
    samples: dict[str, float] = {}
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended ({proc.returncode}):\n{_tail(log)}"
        try:
            samples = scrape_metrics("127.0.0.1", port)
        except OSError:  # not listening yet, or a scrape refused while it starts
            samples = {}
        lags = _lags(samples)
        if (samples.get("reconstructor_records_read_total") == records and len(lags) == partitions
                and not any(lags.values())):
            return samples
        time.sleep(1)
    pytest.fail(f"the run never caught up to {records} records (last scrape: {samples}):\n{_tail(log)}")


def test_a_continuous_run_serves_its_metrics_while_it_runs_and_logs_a_json_line_a_batch(stack, run_id, tmp_path):
    spec = FleetSpec(topic_prefix=f"met{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=10,
                     updates=30, rows_per_update=2, end_sessions=True, seed=5)
    planned = list(plan_fleet(spec))
    # One session loses an update: in quarantine mode it is set aside (its later records SKIPPED,
    # its end among them) while the others end.
    messages, _ = inject(planned, "gap", random.Random(2), session=planned[0].session)
    half = len(messages) // 2
    sessions = spec.sensors * spec.sessions_per_sensor
    produce(spec, messages[:half], PARTITIONS)
    port, metrics_log, log = _free_port(), tmp_path / "metrics.jsonl", tmp_path / "run.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "reconstructor", "run", "--bootstrap-servers", stack.bootstrap_servers(),
             "--topic-pattern", f"met{run_id}-sensor-[0-9]+", "--output", str(tmp_path / "out"),
             "--checkpoint", str(tmp_path / "chk"), "--trigger", "2 seconds", "--compact-every", "off",
             "--on-violation", "quarantine", "--metrics-port", str(port), "--metrics-log", str(metrics_log)],
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        first = _await_caught_up(port, half, proc, log, spec.sensors * PARTITIONS)
        assert first['reconstructor_sessions_written_total{status="open"}'] >= 1
        assert first["reconstructor_state_rows"] >= 1
        assert first["reconstructor_state_memory_bytes"] > 0
        assert first["reconstructor_last_batch_id"] >= 0

        produce(spec, messages[half:], PARTITIONS, create=False)
        second = _await_caught_up(port, len(messages), proc, log, spec.sensors * PARTITIONS)
        assert second["reconstructor_last_batch_id"] > first["reconstructor_last_batch_id"]
        assert second['reconstructor_sessions_written_total{status="ended"}'] == sessions - 1
        assert second['reconstructor_sessions_written_total{status="quarantined"}'] >= 1
        assert second['reconstructor_violations_total{kind="GAP"}'] == 1
        assert second['reconstructor_violations_total{kind="SKIPPED"}'] >= 1  # its end, at least
    finally:
        stop_run(proc)

    batches = [json.loads(line) for line in metrics_log.read_text().splitlines()]
    ids = [b["batch_id"] for b in batches]
    assert ids == sorted(set(ids)) and ids[0] == 0, ids  # one line a batch, in order
    for b in batches:
        assert {"timestamp", "records_read", "duration_seconds", "records_per_second", "kafka_lag",
                "kafka_lag_total", "sessions", "violations", "state_rows", "state_memory_bytes"} <= set(b)
    assert sum(b["records_read"] for b in batches) == len(messages)
    assert sum(b["sessions"]["ended"] for b in batches) == sessions - 1
    assert sum(b["violations"].get("GAP", 0) for b in batches) == 1
    assert batches[-1]["kafka_lag_total"] == 0
    assert batches[-1]["batch_id"] >= second["reconstructor_last_batch_id"]
