"""``make demo`` (``python -m workbench demo``) as a user runs it: every command it prints at the end
works as printed."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kafka import read_all
from workbench.fleet import FleetSpec, expected_tables, plan_fleet

pytestmark = pytest.mark.integration


def _printed_commands(stdout: str) -> list[list[str]]:
    """The commands after the demo's closing "done in ..." line (its "#" lines say what each does)."""
    lines = stdout.splitlines()
    done = next(i for i, line in enumerate(lines) if line.startswith("done in"))
    return [shlex.split(line) for line in lines[done + 1:] if line.strip() and not line.strip().startswith("#")]


def _sensor_table(rows: int, updates: int) -> dict[str, float | None]:
    """The demo sensor's own table (its one session), as ``workbench demo`` plans it: row id and
    temperature, whatever Kafka lost of it."""
    planned = [p for p in plan_fleet(FleetSpec(sensors=1, sessions_per_sensor=1, rows=rows, updates=updates))
               if p.message["type"] != "end"]
    (table,) = expected_tables(planned).values()
    return {rid: values.get("temperature") for rid, values in table.items()}


def test_every_command_the_demo_prints_works_as_printed(stack, tmp_path, run_id):
    # With an update lost in quarantine mode: the run asks the sensor for a snapshot, the demo's
    # sensor answers, and the session ends exact without anyone acting.
    resync = f"demo-resync-{run_id}"
    demo = subprocess.run([sys.executable, "-m", "workbench", "demo", "--sensors", "1", "--sessions", "1",
                           "--rows", "5", "--updates", "5", "--inject", "gap", "--on-violation", "quarantine",
                           "--resync-topic", resync], capture_output=True, text=True, timeout=1800)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "|rdkafka#" not in demo.stderr  # librdkafka's own log lines stay out of the output
    assert "quarantine: 1 session quarantined now" in demo.stdout + demo.stderr
    assert "the sensors answered 1 resync request(s) with a snapshot and ended 1 session(s)" in demo.stdout
    assert "quarantine: 0 sessions quarantined now" in demo.stdout + demo.stderr
    assert [key for key, _ in read_all(stack.bootstrap_servers(), resync)] == [
        line.split()[1] for line in demo.stdout.splitlines() if line.startswith("  demo-") and " ended " in line]
    commands = _printed_commands(demo.stdout)
    # Each starts the reconstructor: the venv's console script, or ``python -m reconstructor``.
    by_name = {argv[next(i for i, a in enumerate(argv) if Path(a).name == "reconstructor") + 1]: argv
               for argv in commands}
    assert set(by_name) == {"state", "check", "run", "config"}, demo.stdout
    config_file = Path(by_name["run"][by_name["run"].index("--config") + 1])
    assert config_file.is_file()
    try:
        # From another folder, with nothing but what is printed.
        ran = {name: subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=tmp_path)
               for name, argv in by_name.items()}
        for name, done in ran.items():
            assert done.returncode == (3 if name == "check" else 0), (name, done.stderr[-3000:])
        # The stream itself lost an update: check names it (the run's resync repaired the tables).
        first, *_, summary = ran["check"].stdout.splitlines()
        assert " INTEGRITY VIOLATION GAP " in first and "NOT CLEAN: 1 session with a problem" in summary, \
            ran["check"].stdout

        state = by_name["state"]
        session = state[state.index("--session") + 1]
        info, *table = ran["state"].stdout.splitlines()
        assert f"session={session}" in info and "status=ended" in info, ran["state"].stdout
        row_count = int(re.search(r"\brow_count=(\d+)", info).group(1))
        assert row_count > 0
        rows = [line.split() for line in table if line.startswith("row-")]
        assert len(rows) == row_count, ran["state"].stdout
        # The sensor's table exactly, the update Kafka lost included (its snapshot carried it).
        held = {r[0]: None if r[1] == "NaN" else float(r[1]) for r in rows}
        assert held.keys() == _sensor_table(5, 5).keys(), ran["state"].stdout
        assert all(held[rid] == pytest.approx(t) if t is not None else held[rid] is None
                   for rid, t in _sensor_table(5, 5).items()), ran["state"].stdout

        shown = ran["config"].stdout
        assert f'checkpoint = "s3a://recon/demo/{config_file.stem}/checkpoint"' in shown, shown
        assert 'secret_key = "***"' in shown and 'secret_key = "test"' not in shown, shown
    finally:
        config_file.unlink(missing_ok=True)
