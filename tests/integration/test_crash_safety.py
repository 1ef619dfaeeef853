"""Crash safety: kill -9 the streaming process at random points, restart, and the tables are exact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from reconstructor.contract.row_schema import RowSchema
from reconstructor.contract.tables import TABLES
from tests.support.cli import cli_in_process
from tests.support.pipeline import (
    assert_exact,
    change_count,
    current_tables,
    expected_all,
    expected_open,
    produce,
    read_table,
    replayed_tables,
    run,
)
from workbench.fleet import FleetSpec, plan_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NAMES = RowSchema.load().names
# Each trial is a driver's start (most of its time), up to three batches, and a kill at a random
# moment inside the batch after those it let through: the first trial's first batch is the appends
# into new tables.  CI's time pays for four; RECON_CRASH_TRIALS=20 draws more.  The points are
# drawn from the run id, so each CI run kills at points of its own.
TRIALS = int(os.environ.get("RECON_CRASH_TRIALS", "4"))


def _start(bootstrap, pattern, out, chk, log):
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "reconstructor", "run", "--bootstrap-servers", bootstrap,
         "--topic-pattern", pattern, "--output", out, "--checkpoint", chk, "--trigger", "1 second",
         "--max-offsets-per-trigger", "150", "--compact-every", "off",
         # the killed run's writer lease expires soon: its successor on the checkpoint waits it out
         "--lease-ttl", "4 seconds"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _batches_done(log_path) -> int:
    with open(log_path) as fh:
        return sum(1 for line in fh if line.startswith("batch "))


def _planned(chk: str) -> int:
    """The last batch the checkpoint planned (its ``offsets`` log), -1 before any."""
    folder = os.path.join(chk, "offsets")
    return max((int(name) for name in os.listdir(folder) if name.isdigit()), default=-1) \
        if os.path.isdir(folder) else -1


def _logged(chk: str, log: str) -> list[int]:
    """The batch ids in one of the checkpoint's logs."""
    return sorted(int(name) for name in os.listdir(os.path.join(chk, log)) if name.isdigit())


def _due(log_path, target: int, chk: str, planned_before: int) -> bool:
    """The trial's run let ``target`` batches through; with none to let through, it planned one
    (so the kill lands in a batch, not in the wait for the killed run's lease)."""
    if target:
        return _batches_done(log_path) >= target
    return _planned(chk) > planned_before


def test_kill_9_at_random_points_loses_and_repeats_nothing(stack, spark, run_id, tmp_path):
    # Enough records for every trial to be killed mid-stream (trials of up to 4 batches of 150, over
    # 4 sessions): a trial that found nothing left to read would only wait out its deadline.
    spec = FleetSpec(topic_prefix=f"crash{run_id}-sensor-", sensors=2, sessions_per_sensor=2,
                     rows=30, updates=150 * TRIALS + 100,
                     rows_per_update=2, resync_every=200, seed=13)
    messages = list(plan_fleet(spec))
    produce(spec, messages, 2)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"crash{run_id}-sensor-[0-9]+"
    rng = random.Random(run_id)
    kills = []
    for trial in range(TRIALS):
        planned = _planned(chk)
        log_path = tmp_path / f"run-{trial}.log"
        with open(log_path, "w") as log:
            proc = _start(stack.bootstrap_servers(), pattern, out, chk, log)
            target = rng.randint(0, 3)  # batches to let through before the kill
            # then a random moment of the next batch, its commits included (a batch of a warm
            # driver takes 6 to 10 s here, a driver's first about 18 s)
            extra = rng.uniform(0, 8) if target else rng.uniform(0, 18)
            deadline = time.monotonic() + 240
            while not _due(log_path, target, chk, planned) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(extra)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kills.append((target, round(extra, 2)))
        assert proc.returncode == -signal.SIGKILL, log_path.read_text()[-3000:]

    run(spark, pattern, out, chk)  # finish in-process, from the same checkpoint
    assert current_tables(spark, out, NAMES) == expected_open(messages, NAMES), kills
    assert replayed_tables(spark, out, NAMES) == expected_all(messages, NAMES), kills
    # No change lost and none repeated: the log holds exactly one row per applied change.
    changes = read_table(spark, out, "row_changes")
    assert changes.count() == change_count(messages), kills
    assert changes.select("topic", "partition", "offset", "row_pos", "row_id").distinct().count() == \
        changes.count()
    sessions = {(r.topic, r.session): r for r in read_table(spark, out, "sessions").collect()}
    assert {r.last_seq for r in sessions.values()} == {max(p.message["seq"] for p in messages)}


@pytest.mark.parametrize("earlier_release", [False, True], ids=["this-release", "earlier-release"])
def test_a_batch_stopped_after_its_appends_runs_again_writing_only_what_it_had_not(
        stack, spark, run_id, tmp_path, monkeypatch, earlier_release):
    """Batch 2 stops after its appends committed and before its MERGEs: the next run skips the
    appends its commits name, and writes the MERGEs.  With ``earlier_release``, the stopped
    attempt wrote as the release before (Delta's transaction ids, no write named), so the next run
    leaves the table where it finds such a commit to those ids."""
    from delta.tables import DeltaTable

    from reconstructor.contract.batch_writes import WriteMode
    from reconstructor.contract.writer import batch_record
    from reconstructor.spark.sinks import delta_sinks, idempotency

    spec = FleetSpec(topic_prefix=f"rerun{run_id}-sensor-", sensors=2, sessions_per_sensor=2, rows=8,
                     updates=60, rows_per_update=2, seed=29)
    messages = list(plan_fleet(spec))
    produce(spec, messages, 2)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    pattern = f"rerun{run_id}-sensor-[0-9]+"

    merge = delta_sinks.merge_live_tables

    def stops_in_batch_2(spark_, txn, *args, **kwargs):
        if txn.batch_id == 2:
            raise RuntimeError("stopped between the appends and the MERGEs")
        return merge(spark_, txn, *args, **kwargs)

    monkeypatch.setattr(delta_sinks, "merge_live_tables", stops_in_batch_2)
    if earlier_release:
        monkeypatch.setattr(idempotency.WrittenBatches, "mode", lambda *_: WriteMode.DELTA)
        monkeypatch.setattr(idempotency, "with_write", lambda metadata, _write: metadata)
    with pytest.raises(Exception, match="the streaming query failed"):
        run(spark, pattern, out, chk, max_offsets_per_trigger=60)
    monkeypatch.undo()
    assert _logged(chk, "commits") == [0, 1] and _logged(chk, "offsets") == [0, 1, 2]
    stopped = [batch_record(r.userMetadata) for r in
               DeltaTable.forPath(spark, f"{out}/row_changes").history().collect()]
    assert [r["batch"] for r in stopped if r] == [2, 1, 0]  # the stopped batch's append committed
    assert all(("write" in r) != earlier_release for r in stopped if r)

    run(spark, pattern, out, chk, max_offsets_per_trigger=60)
    assert_exact(spark, out, messages, NAMES)
    rerun = [batch_record(r.userMetadata) for r in
             DeltaTable.forPath(spark, f"{out}/row_changes").history().collect()]
    assert [r["batch"] for r in rerun if r].count(2) == 1
    if earlier_release:
        return

    # A replay into the output, once its tables' logs were cleaned (as delta.logRetentionDuration
    # does), stopped in its first batch: run again on its checkpoint, it carries on, as the log
    # keeps every commit since the batch was planned.
    for name in TABLES:
        _clean_log(spark, f"{out}/{name}")
    replay = ("replay", "--bootstrap-servers", stack.bootstrap_servers(), "--topic-pattern", pattern,
              "--output", out, "--checkpoint", str(tmp_path / "replay-chk"), "--from-timestamp",
              "1970-01-01T00:00:00Z")
    monkeypatch.setattr(delta_sinks, "merge_live_tables", stops_in_batch_0)
    stopped = cli_in_process(*replay)
    monkeypatch.undo()
    assert stopped.returncode == 1 and "the streaming query failed" in stopped.stderr, stopped.stderr[-3000:]
    assert _logged(str(tmp_path / "replay-chk"), "offsets") == [0]
    again = cli_in_process(*replay)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact(spark, out, messages, NAMES)


def stops_in_batch_0(*args, **kwargs):
    raise RuntimeError("stopped in the first batch")


def _clean_log(spark, path: str) -> None:
    """Leave ``path``'s log as Delta's log cleanup leaves it: a checkpoint at its newest version,
    and no commit before that."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    log = os.path.join(path, "_delta_log")
    newest = max(int(name.split(".")[0]) for name in os.listdir(log) if name.endswith(".json") and name[0].isdigit())
    assert os.path.exists(os.path.join(log, f"{newest:020d}.checkpoint.parquet"))
    for name in os.listdir(log):
        if name[0].isdigit() and int(name.split(".")[0]) < newest:
            os.remove(os.path.join(log, name))
